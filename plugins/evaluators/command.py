"""``dmlplug evaluate FILE.npz``: registered evaluators on saved embeddings.

Imported by the ``register_commands`` hook only (typer at module level).
"""

from __future__ import annotations

import typer


def evaluate_command(
    file: str = typer.Argument(..., help="An .npz with 'embeddings' (N×D), 'labels' (N) and optional "
                                         "'query_mask'/'gallery_mask'."),
    evaluator: list[str] = typer.Option(None, "--evaluator", "-e",
                                        help="Evaluator name (repeatable); default: retrieval."),
    set_: list[str] = typer.Option(None, "--set", help="evaluator.param=value (repeatable)."),
    json_output: bool = typer.Option(False, "--json", help="Print one flat JSON object."),
    backend: str = typer.Option("auto", help="kNN backend: auto, faiss-cpu, faiss-gpu or torch."),
    memory_budget_mb: float = typer.Option(None, help="Working-memory budget in MiB (default 256)."),
    seed: int = typer.Option(0, help="Seed for k-means and pair sampling."),
    artifacts: str = typer.Option(None, help="Folder for curves and per-class tables."),
) -> None:
    """Evaluate saved embeddings with registered evaluators."""
    from dmlplug.evaluation.api import evaluate_file, format_table, to_json

    metrics, ctx = evaluate_file(file, evaluator or None, set_ or [], backend=backend,
                                 memory_budget_mb=memory_budget_mb, seed=seed, artifacts_dir=artifacts)
    if json_output:
        typer.echo(to_json(metrics))
    else:
        typer.echo(format_table(metrics))
        typer.echo(f"kNN backend: {ctx.backend_used}")
