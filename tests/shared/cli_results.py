"""Assertions on what the in-process ``cli`` fixture returns: ``(exit status, stdout, stderr)``."""

from __future__ import annotations


def ok(result: tuple[int, str, str]) -> tuple[str, str]:
    """``(stdout, stderr)`` of a command that must have succeeded."""
    code, out, err = result
    assert code == 0, err
    return out, err


def one_clear_error(result: tuple[int, str, str], *phrases: str) -> None:
    """A command that failed with exit 2 and one error message (no traceback) holding every phrase and a fix."""
    code, _, err = result
    assert code == 2, err
    assert "Traceback" not in err and err.count("error: ") == 1 and "  fix:" in err, err
    for phrase in phrases:
        assert phrase in err, err
