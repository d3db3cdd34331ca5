"""Root conftest: makes tests/shared importable (helpers used by tests in several folders), and shares the cores
fairly between pytest-xdist's workers."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "shared"))

#: The variables that size the thread pools of torch (OpenMP), MKL, OpenBLAS and faiss.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pytest_configure(config):
    """Under ``-n N``, give each worker (and every process it starts) cores // N threads.

    Two workers that each start an OpenMP pool as large as the machine oversubscribe it: OpenMP's threads spin while
    they wait for a partner that the other worker's threads keep off the core, and on 2 cores the quickstart's
    training took 410 s beside another worker instead of 66 s alone. A variable the user set is kept. The
    variables are set before any test imports torch, and children (``dmlplug`` subprocesses, torchrun) inherit them.
    """
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    threads = str(max(1, (os.cpu_count() or 1) // int(workers)))
    for variable in THREAD_VARIABLES:
        os.environ.setdefault(variable, threads)


def pytest_collection_modifyitems(config, items):
    """Modules holding a ``slow`` test first (in their collected order), then the others.

    pytest-xdist hands modules to its workers in this order: a minute-long end-to-end test that started last would
    keep one worker busy while the other has nothing left to do.
    """
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow_modules)


@pytest.fixture
def single_thread():
    """Tiny tensors: one torch thread avoids thread start-up and contention costs (20x faster on 2 shared cores)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def seeded():
    """Seed torch and numpy's global generators, for tests that draw random tensors."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    np.random.seed(0)
    yield


@pytest.fixture
def cli(capsys):
    """Run the ``dmlplug`` command line in-process: ``(exit status, stdout, stderr)``."""
    from dmlplug.cli import main

    def invoke(*args):
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code or 0
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke
