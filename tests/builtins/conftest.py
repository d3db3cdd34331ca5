"""Fixtures of the tests of the built-in plugins (one folder per concern, as under plugins/)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Every component test runs single-threaded (fixture in tests/conftest.py)."""
    yield
