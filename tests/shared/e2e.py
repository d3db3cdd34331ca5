"""Helpers shared by end-to-end tests: repository root, a seconds-long recipe, a CLI runner, a learning check."""

import json
import math
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


def run_cli(*args, env=None, cwd=None, timeout=600):
    """Run `python -m dmlplug ARGS` and return the CompletedProcess (``timeout`` seconds: a hang fails the test)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "dmlplug", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


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


def sigkill_when(child, ready, *, what="no mid-epoch checkpoint appeared", timeout=300):
    """SIGKILL the subprocess ``child`` as soon as ``ready`` holds (it fails the test if it never does).

    Args:
        child: A ``subprocess.Popen`` with ``stderr=PIPE`` (shown when it ends on its own).
        ready: A file that must exist, or a function returning True once the child may be killed.
        what: The failure message when ``timeout`` seconds pass first.
        timeout: Seconds to wait.
    """
    import signal
    import time

    check = ready if callable(ready) else ready.exists
    try:
        deadline = time.time() + timeout
        while not check():
            assert child.poll() is None, child.stderr.read()
            assert time.time() < deadline, what
            time.sleep(0.2)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()


# The learning protocol of the method recipes' end-to-end tests (tests/engine/test_recipes.py, the DiVA and S2SD
# ones): 50 training characters (~9 steps of 64 a epoch, 5 epochs), 50 test characters x 12 = 600 queries, so
# that the binomial noise of recall@1 (<= 0.020 per evaluation) is small beside what training gains. One fixed
# seed; the untrained model is evaluated first (evaluation.initial) and once more after the last epoch.
LEARNING_PROTOCOL = ["run.seed=0", "run.epochs=5", "data.dataset.num_classes=100", "data.dataset.images_per_class=12",
                     "evaluation.initial=true", "evaluation.every=5"]


def untrained_and_trained(run_dir, metric="recall@1"):
    """A run's own untrained and final ``metric`` and the number of test queries both were measured on.

    Reads ``results.json`` (``initial_metrics``: the evaluation before the first step, which needs
    ``evaluation.initial = true``; ``metrics``: the last evaluation) and ``data.json`` (the test split's
    ``queries``, or its ``images`` where every test image is a query), as docs/run-directory.md describes them.
    """
    results = json.loads((Path(run_dir) / "results.json").read_text())
    test = json.loads((Path(run_dir) / "data.json").read_text())["splits"]["test"]
    return results["initial_metrics"][metric], results["metrics"][metric], test.get("queries", test["images"])


def recall_standard_error(queries):
    """The largest binomial standard error of a recall@k measured on ``queries`` queries: sqrt(p(1-p)/n) at p = 0.5."""
    return 0.5 / math.sqrt(queries)


#: Standard errors (of the difference of two recall@1 values on the same test queries) by which training must beat
#: the run's own untrained evaluation: 0.087 on the learning protocol's 600 queries. Sampling noise alone exceeds 3
#: such errors with probability ~0.1%; a broken run (learning rate 1e-12) gains -0.003. Measured with
#: `python benchmarks/recipe_learning.py --seeds 0 1 2` (2026-11-23): the smallest gain of 12 method/seed runs was
#: +0.118 (DiVA, seed 2), so 4 errors (0.115) would leave almost no room, 3 leave 1.36x; the tests use seed 0.
LEARNS_BY = 3.0


def assert_learns(run_dir, standard_errors=LEARNS_BY, metric="recall@1"):
    """Assert that training raised ``metric`` above the run's own untrained evaluation by a margin beyond noise.

    The margin is ``standard_errors`` standard errors of the difference of two recalls measured on the same
    number of queries (sqrt(2) x :func:`recall_standard_error`, its largest value), so it scales with the test
    split. A broken method (loss weight 0, learning rate 0) ends with the untrained weights and only new
    batch-norm statistics; benchmarks/recipe_learning.py checks that such a run misses the margin.

    Returns:
        ``(untrained, trained, margin)``.
    """
    before, after, queries = untrained_and_trained(run_dir, metric)
    margin = standard_errors * math.sqrt(2) * recall_standard_error(queries)
    print(f"{metric}: untrained {before:.4f} -> trained {after:.4f} on {queries} queries (margin {margin:.4f})")
    assert after > before + margin, f"{metric} {before:.4f} -> {after:.4f}: not above untrained + {margin:.4f}"
    return before, after, margin


#: The bundle tests' seconds-long run of TINY_RECIPE: 4 steps, one evaluation (best.pt holds the final weights),
#: no validation split, so calibration runs on the test split. Here rather than in tests/bundle/conftest.py:
#: test modules import it, and ``from conftest import`` resolves to whichever conftest was imported first.
BUNDLE_RUN_SETS = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8",
                   "data.sampler.m=2", "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=1",
                   "evaluation.initial=false"]
