"""Evaluation: EvalContext, kNN backends, metrics."""
