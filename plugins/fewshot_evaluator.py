"""Few-shot adaptation (ooDML protocol, METHODS §6): the ``fewshot`` evaluator and ``dmlplug fewshot``.

The protocol itself lives in :mod:`dmlplug.oodml.fewshot` (imported inside the functions, so loading
this plugin stays torch-free). See ``docs/fewshot.md``.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from pydantic import Field

from dmlplug import hookimpl
from dmlplug.oodml.fewshot import FewShotSettings
from dmlplug_builtins.oodml_commands import int_list


class FewShotParams(FewShotSettings):
    """Parameters of the ``fewshot`` evaluator."""

    model: Literal["best", "final"] = Field(
        "best", description="Adapt the selected checkpoint (best.pt) or the model at the end of training.")
    split_file: str | None = Field(
        None, description="Split file whose stored episodes are used (default: the recipe's [data] split_file; "
                          "without one, episodes are sampled from the test split).")
    split_id: int | None = Field(None, ge=1, description="Split id in split_file (default: [data] split_id).")


class FewShotEvaluator:
    """Runs the few-shot protocol once, when the run has completed.

    Per-epoch evaluations are leave-one-out metrics of the whole test set and need no few-shot
    adaptation, so :meth:`evaluate` contributes nothing to them. At the end of a completed run the
    evaluator adapts copies of the model's head (the run's own weights are never changed), writes
    ``fewshot.json`` into the run directory and adds the summary to ``results.json`` under ``fewshot``.
    """

    name = "fewshot"

    def __init__(self, params: FewShotParams, ctx: Any):
        self.params = params
        self._ctx = ctx
        self.report = None
        self._in_run = False
        self._plugin_name = f"fewshot-evaluator-{id(self)}"
        host = getattr(ctx, "host", None)
        if host is not None:
            host.register_run_plugin(self, self._plugin_name)
            self._host = host
        else:
            self._host = None

    def evaluate(self, ctx: Any) -> dict[str, float]:
        """No per-epoch metrics: the protocol runs once, after training (see the class docstring).

        Raises:
            ComponentError: Used outside a training run (e.g. ``dmlplug evaluate``): there is no model to
                adapt.
        """
        if not self._in_run:
            from dmlplug.errors import ComponentError

            raise ComponentError("the fewshot evaluator adapts a model and cannot evaluate saved embeddings",
                                 where="evaluator 'fewshot'",
                                 fix="use it in a recipe's [[evaluators]], or run `dmlplug fewshot RUN_DIR`")
        return {}

    @hookimpl
    def on_run_start(self, run: Any) -> None:
        """Remember that this evaluator belongs to a running training run."""
        if getattr(run, "ctx", None) is self._ctx:
            self._in_run = True

    @hookimpl
    def on_run_end(self, run: Any, status: str, error: BaseException | None) -> None:
        """Adapt and evaluate the finished run's model; record the report in the run directory."""
        if getattr(run, "ctx", None) is not self._ctx:
            return  # a stale registration from a run whose build failed: not ours
        try:
            if status == "completed":
                self._evaluate_run(run)
        finally:
            if self._host is not None:
                self._host.unregister_run_plugin(self._plugin_name)

    def _evaluate_run(self, run: Any) -> None:
        import copy
        import json

        from dmlplug.engine.atomic import write_json
        from dmlplug.engine.checkpoint import load_checkpoint
        from dmlplug.oodml.fewshot import run_fewshot, split_file_episodes

        c, r = run.components, run.recipe.recipe
        model = run.model
        best = run.checkpoint_dir / "best.pt"
        if self.params.model == "best" and best.is_file():
            model = copy.deepcopy(run.model)
            model.load_state_dict(load_checkpoint(best, map_location="cpu")["model"])
        split_file = self.params.split_file or r.data.split_file
        split_id = self.params.split_id or r.data.split_id
        episodes = split_file_episodes(split_file, split_id) if split_file and split_id else None
        settings = FewShotSettings(**self.params.model_dump(exclude={"model", "split_file", "split_id"}))
        report = run_fewshot(model, c.dataset.test, c.test_transform, settings, episodes=episodes,
                             device=run.device, eval_batch_size=r.data.eval_batch_size, workers=r.data.workers,
                             backend=r.evaluation.backend)
        self.report = report
        report.save(run.directory / "fewshot.json")
        results = run.directory / "results.json"
        if results.is_file():
            payload = json.loads(results.read_text(encoding="utf-8"))
            payload["fewshot"] = report.flat_metrics()
            write_json(results, payload)
        print("few-shot adaptation (mean ± 95% CI over episodes, %):\n" + report.table(), file=sys.stderr)


def build_fewshot(params: FewShotParams, ctx: Any) -> Any:
    """The few-shot evaluator."""
    return FewShotEvaluator(params, ctx)


@hookimpl
def register_evaluators(register: Any) -> None:
    """Register ``fewshot``."""
    register("fewshot", build_fewshot, params=FewShotParams, tags=("needs_model",),
             description="ooDML few-shot adaptation of the embedding head after training (fewshot.json; "
                         "zero-shot vs adapted recall@1 and map@1000, mean ± 95% CI over episodes).")


def _iterations(text: str | None) -> dict[int, int] | None:
    from dmlplug.errors import RecipeError

    if text is None:
        return None
    result = {}
    for part in text.split(","):
        try:
            shots, count = part.split("=")
            result[int(shots)] = int(count)
        except ValueError:
            raise RecipeError(f"--iterations must look like 2=1000,5=1500, got {text!r}",
                              where="--iterations") from None
    return result


@hookimpl
def register_commands(app: Any) -> None:
    """Add ``dmlplug fewshot RUN_DIR_OR_CHECKPOINT``."""
    import typer

    @app.command("fewshot")
    def fewshot_command(
        path: str = typer.Argument(..., help="A run directory or a checkpoint (.pt) of one."),
        shots: str = typer.Option("2,5", help="Support images per class, comma-separated."),
        episodes: int = typer.Option(10, help="Episodes per shot count."),
        iterations: str = typer.Option(None, help="Adaptation iterations per shot count, e.g. 2=1000,5=1500 "
                                                  "(default: those; other counts 1000)."),
        lr: float = typer.Option(1e-4, help="Adam learning rate of the head."),
        batch_size: int = typer.Option(112, help="Support images per adaptation batch."),
        beta: float = typer.Option(1.2, help="Fixed Margin-loss β."),
        seed: int = typer.Option(0, help="Seed of batches, miner and sampled episodes."),
        split_file: str = typer.Option(None, help="Split file with stored episodes (default: the run's)."),
        split_id: int = typer.Option(None, help="Split id in --split-file (default: the run's)."),
        checkpoint: str = typer.Option("best", help="best or last (for a run directory)."),
        device: str = typer.Option("auto", help="auto, cpu or cuda."),
        out: str = typer.Option(None, help="Report file (default: <run dir>/fewshot.json)."),
        set_: list[str] = typer.Option(None, "--set", "-s", help="Override the run's recipe, e.g. a moved "
                                                                 "data.dataset.root (repeatable)."),
        json_output: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ) -> None:
        """Few-shot adaptation of a trained run's embedding head (ooDML protocol); the run is not modified."""
        import json
        from pathlib import Path

        from dmlplug.engine.device import resolve_device
        from dmlplug.oodml.fewshot import FewShotSettings, load_run, run_fewshot, split_file_episodes

        settings_kwargs: dict[str, Any] = {"shots": int_list(shots, "--shots"), "episodes": episodes, "lr": lr,
                                           "batch_size": batch_size, "beta": beta, "seed": seed}
        parsed = _iterations(iterations)
        if parsed is not None:
            settings_kwargs["iterations"] = parsed
        from pydantic import ValidationError

        from dmlplug.errors import RecipeError

        try:
            settings = FewShotSettings(**settings_kwargs)
        except ValidationError as exc:
            raise RecipeError(f"invalid few-shot option: {exc.errors()[0]['msg']}",
                              where=".".join(map(str, exc.errors()[0]["loc"]))) from None
        resolved = resolve_device(device)
        loaded = load_run(path, which=checkpoint, device=resolved, overrides=list(set_ or []))
        r = loaded.recipe.recipe
        file = split_file or r.data.split_file
        sid = split_id or r.data.split_id
        stored = split_file_episodes(file, sid) if file and sid else None
        report = run_fewshot(loaded.model, loaded.dataset.test, loaded.test_transform, settings, episodes=stored,
                             device=resolved, eval_batch_size=r.data.eval_batch_size, workers=r.data.workers,
                             backend=r.evaluation.backend)
        report.info["checkpoint"] = str(loaded.checkpoint)
        target = Path(out) if out else (loaded.run_dir or loaded.checkpoint.parent) / "fewshot.json"
        report.save(target)
        if json_output:
            typer.echo(json.dumps({"report": str(target), **report.flat_metrics()}, indent=2))
        else:
            typer.echo(f"few-shot adaptation of {loaded.checkpoint} ({report.info['episodes_from']} episodes), "
                       "mean ± 95% CI over episodes, %:")
            typer.echo(report.table())
            typer.echo(f"report: {target}")
