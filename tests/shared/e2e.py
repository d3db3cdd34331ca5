"""Helpers shared by end-to-end tests: repository root, a seconds-long recipe, a CLI runner."""

import os
import subprocess
import sys
from pathlib import Path

from dmlplug import hookimpl

ROOT = Path(__file__).resolve().parents[2]

TINY_RECIPE = """
[run]
name = "tiny"
epochs = 1
[data]
batch_size = 32
eval_batch_size = 256
image_size = 32
[data.dataset]
name = "glyphs"
num_classes = 40
images_per_class = 8
[data.sampler]
name = "m_per_class"
m = 4
[backbone]
name = "timm"
model = "resnet10t"
[head]
name = "linear"
embedding_size = 16
[loss]
name = "multi_similarity"
[optimizer]
lr = 1e-3
[[evaluators]]
name = "recall"
k = [1, 2]
[[loggers]]
name = "console"
"""


def run_cli(*args, env=None, cwd=None):
    """Run `python -m dmlplug ARGS` and return the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "dmlplug", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=600)


def broken_plugin_site(folder, *, dist="broken-plugin", module="broken_plugin", entry="broken",
                       body="import this_dependency_does_not_exist\n"):
    """A folder for PYTHONPATH holding an installed distribution whose `dmlplug` entry point fails to import."""
    site = Path(folder)
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[dmlplug]\n{entry} = {module}\n")
    (site / f"{module}.py").write_text(body)
    return site


class SigtermAtStep:
    """A throwaway plugin that sends this process SIGTERM after optimizer step ``step`` (an interrupt)."""

    def __init__(self, step):
        self.step = step

    @hookimpl
    def on_step_end(self, run, step, losses):
        import signal

        if step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def sigkill_when(child, marker, *, what="no mid-epoch checkpoint appeared", timeout=300):
    """SIGKILL the subprocess ``child`` as soon as the file ``marker`` exists (it fails the test if none comes)."""
    import signal
    import time

    try:
        deadline = time.time() + timeout
        while not marker.exists():
            assert child.poll() is None, child.stderr.read()
            assert time.time() < deadline, what
            time.sleep(0.2)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
