"""Fixtures of the component tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture
def seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    yield


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny tensors: one thread avoids thread start-up and contention costs (20x faster on 2 shared cores)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
