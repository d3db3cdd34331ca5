"""Evaluation: :class:`EvalContext` (shared exact kNN graph), metric maths and :func:`run_evaluators`.

Importing this package imports numpy but not torch; torch and faiss are imported when a search runs.
"""

from dmlplug.evaluation.context import EvalContext
from dmlplug.evaluation.runner import collect_figures, run_evaluators, write_all_artifacts

__all__ = ["EvalContext", "collect_figures", "run_evaluators", "write_all_artifacts"]
