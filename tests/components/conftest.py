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
def _one_thread(single_thread):
    """Every component test runs single-threaded (fixture in tests/conftest.py)."""
    yield
