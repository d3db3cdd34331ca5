"""Fixtures of the registry-wide component tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Every component test runs single-threaded (fixture in tests/conftest.py)."""
    yield
