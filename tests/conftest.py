"""Root conftest: makes tests/shared importable (helpers used by tests in several folders)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "shared"))


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
