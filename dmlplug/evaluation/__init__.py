"""Evaluation: :class:`EvalContext` (shared exact kNN graph), metric maths and :func:`run_evaluators`.

Importing this package imports nothing heavy: its names below come from their modules on first use (numpy with
them; torch and faiss when a search runs), so that ``dmlplug validate``, which reads only
:mod:`dmlplug.evaluation.best`, starts without numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmlplug.evaluation.context import EvalContext
    from dmlplug.evaluation.runner import collect_figures, run_evaluators, write_all_artifacts

__all__ = ["EvalContext", "collect_figures", "run_evaluators", "write_all_artifacts"]

_HOMES = {"EvalContext": "context", "collect_figures": "runner", "run_evaluators": "runner",
          "write_all_artifacts": "runner"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
