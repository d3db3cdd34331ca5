"""``dmlplug evaluate FILE.npz``: registered evaluators on saved embeddings.

Imported by the plugin's ``register_commands`` hookimpl only (typer at module level), which adds
:func:`cmd_evaluate` to the app.
"""

from __future__ import annotations

from typing import Annotated

import typer


def cmd_evaluate(
    file: Annotated[str, typer.Argument(help="An .npz with 'embeddings' (N×D), 'labels' (N) and optional "
                                             "'query_mask'/'gallery_mask'.")],
    evaluator: Annotated[list[str] | None, typer.Option("--evaluator", "-e",
                                                        help="Evaluator name (repeatable); default: retrieval.")]
    = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="evaluator.param=value (repeatable).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one flat JSON object.")] = False,
    backend: Annotated[str, typer.Option(help="kNN backend: auto, faiss-cpu, faiss-gpu or torch.")] = "auto",
    memory_budget_mb: Annotated[float | None, typer.Option(help="Working-memory budget in MiB (default 256).")]
    = None,
    seed: Annotated[int, typer.Option(help="Seed for k-means and pair sampling.")] = 0,
    artifacts: Annotated[str | None, typer.Option(help="Folder for curves and per-class tables.")] = None,
) -> None:
    """Evaluate saved embeddings with registered evaluators."""
    import dmlplug
    from dmlplug.evaluation.api import evaluate_file, format_table, to_json

    metrics, eval_context = evaluate_file(file, evaluator or None, set_ or [], host=dmlplug.plugin_host(),
                                          backend=backend, memory_budget_mb=memory_budget_mb, seed=seed,
                                          artifacts_dir=artifacts)
    if json_output:
        typer.echo(to_json(metrics))
    else:
        typer.echo(format_table(metrics))
        typer.echo(f"kNN backend: {eval_context.backend_used}")
