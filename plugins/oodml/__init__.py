"""Built-in plugin ``oodml``: the ooDML benchmark and few-shot adaptation, built on the public hooks only.

It registers

* dataset ``oodml_split``: any registered dataset re-partitioned by the classes of one split of an ooDML
  split file (``[data.dataset] name = "oodml_split"`` wrapping ``dataset = {name = "cub200", ...}``);
* evaluator ``fewshot``: few-shot adaptation of the embedding head once training has completed;
* the commands ``dmlplug oodml splits | run | summarize`` and ``dmlplug fewshot``;
* a ``dmlplug report`` section: each run's split FID, AGS per metric and the metric-vs-FID figure.

This module holds the parameters, factories and hook implementations and imports neither torch nor its
implementation modules, which sit beside it: :mod:`.frechet`, :mod:`.swapping`, :mod:`.selection`,
:mod:`.assemble`, :mod:`.episodes`, :mod:`.features` (split generation), :mod:`.splitfile` (the split-file
format), :mod:`.dataset` (the dataset wrapper), :mod:`.sweep` and :mod:`.summary` (sweeps), :mod:`.ags`,
:mod:`.adaptation`, :mod:`.fewshot` and :mod:`.fewshot_stats` (the few-shot protocol), :mod:`.evaluator`,
:mod:`.commands` and :mod:`.report`. See docs/oodml.md and docs/fewshot.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from dmlplug import BuildContext, ComponentTable, Params, TableOf, hookimpl
from dmlplug.protocols import Register, ReportSection, RunView

# ---------------------------------------------------------------------------------------------- dataset


class OodSplitParams(Params):
    """Parameters of dataset ``oodml_split``: one split of a split file, applied to a wrapped dataset."""

    split_file: str = Field(description="ooDML split file: JSON from `dmlplug oodml splits`, or a published .pkl "
                                        "(a relative path is looked up from the working directory, then the run "
                                        "directory).")
    split_id: int = Field(ge=1, description="Id of the split in split_file (1 = least shifted).")
    part: Literal["zero_shot", "few_shot_base"] = Field(
        "zero_shot", description="zero_shot: train on the split's train classes; few_shot_base: train on its "
                                 "split_train classes and validate on split_val (few-shot base models).")
    dataset: Annotated[ComponentTable, TableOf("datasets")] = Field(
        description='The wrapped dataset\'s table, e.g. {name = "cub200", root = "..."}; its images are '
                    're-partitioned by class name.')

    def extra_tags(self) -> tuple[str, ...]:
        """The wrapped dataset's capabilities (e.g. SOP's super_labels) survive the re-partition."""
        return (*self.dataset.info.tags, *self.dataset.params.extra_tags())

    def extra_requires(self) -> tuple[str, ...]:
        """The wrapped dataset's requirements."""
        return (*self.dataset.info.requires, *self.dataset.params.extra_requires())

    def has_validation_split(self) -> bool:
        """A few-shot base part validates on the split's ``split_val`` classes; a zero-shot part has no validation."""
        return self.part == "few_shot_base"


def build_oodml_split(params: OodSplitParams, ctx: BuildContext) -> Any:
    """Build the wrapped dataset through the registry and re-partition it by the split's class names."""
    from dmlplug_builtins.oodml.dataset import select_split

    bundle = ctx.build("dataset", params.dataset, where="data.dataset.dataset")
    search = [ctx.run_dir] if ctx.run_dir is not None else []
    return select_split(bundle, params.split_file, params.split_id, params.part, search=search)


# ---------------------------------------------------------------------------------------------- few-shot


class FewShotSettings(Params):
    """How episodes are adapted (defaults: docs/fewshot.md, the ooDML few-shot tables)."""

    shots: list[int] = Field(default_factory=lambda: [2, 5], description="Support images per test class.")
    episodes: int = Field(10, ge=1, description="Episodes per shot count (the first N of a split file).")
    iterations: dict[int, int] = Field(
        default_factory=lambda: {2: 1000, 5: 1500},
        description="Adaptation iterations per shot count (ooDML: 1000 for 2-shot, 1500 for 5-shot).")
    default_iterations: int = Field(1000, ge=0, description="Iterations for shot counts not in `iterations`.")
    lr: float = Field(1e-4, gt=0, description="Adam learning rate of the head (ooDML: 10 × 1e-5).")
    weight_decay: float = Field(0.0, ge=0, description="Adam weight decay (ooDML: none).")
    batch_size: int = Field(112, ge=2, description="Support images per adaptation batch (ooDML: 112).")
    samples_per_class: int = Field(2, ge=2, description="Images per class in a batch (class-random SPC-2).")
    margin: float = Field(0.2, gt=0, description="Margin loss α.")
    beta: float = Field(1.2, gt=0, description="Margin loss β, fixed during adaptation (ooDML: β₀ = 1.2).")
    lower_cutoff: float = Field(0.5, gt=0, description="Distance-weighted miner's lower distance cut-off λ.")
    seed: int = Field(0, ge=0, description="Seed of the batches and the miner (reseeded per episode).")
    confidence: float = Field(0.95, gt=0, lt=1, description="Level of the reported confidence interval.")
    cpu_threads: int = Field(1, ge=0, description="torch CPU threads while adapting (0: leave as is).")

    @field_validator("shots")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(k < 1 for k in value):
            raise ValueError("give at least one shot count, each >= 1")
        return sorted(set(value))

    def iterations_for(self, shots: int) -> int:
        """Adaptation iterations for ``shots``-shot episodes."""
        return int(self.iterations.get(shots, self.default_iterations))


class FewShotParams(FewShotSettings):
    """Parameters of the ``fewshot`` evaluator."""

    model: Literal["best", "final"] = Field(
        "best", description="Adapt the selected checkpoint (best.pt) or the model at the end of training.")
    split_file: str | None = Field(
        None, description="Split file whose stored episodes are used (default: the one of the run's oodml_split "
                          "dataset; without one, episodes are sampled from the test split).")
    split_id: int | None = Field(None, ge=1, description="Split id in split_file (default: the run's split).")

    def metric_names(self) -> tuple[str, ...]:
        """No per-epoch metric: ``evaluate`` returns none (so none can select best.pt).

        The evaluator adapts the model once, after training, and records its results
        (``fewshot/<k>shot/<mode>/<metric>``) in fewshot.json and under ``fewshot`` in results.json.
        """
        return ()


def build_fewshot(params: FewShotParams, ctx: BuildContext) -> Any:
    """The few-shot evaluator (it runs the protocol when its run completes, see :func:`on_run_end`)."""
    from dmlplug_builtins.oodml.evaluator import FewShotEvaluator

    return FewShotEvaluator(params, quiet=ctx.quiet)


# ---------------------------------------------------------------------------------------------- hooks


@hookimpl
def register_datasets(register: Register) -> None:
    """Register ``oodml_split``."""
    register("oodml_split", build_oodml_split, params=OodSplitParams,
             description="Any dataset re-partitioned by the classes of one ooDML split (split file JSON or "
                         "published .pkl); part zero_shot or few_shot_base.")


@hookimpl
def register_evaluators(register: Register) -> None:
    """Register ``fewshot``."""
    register("fewshot", build_fewshot, params=FewShotParams, tags=("needs_model",),
             description="ooDML few-shot adaptation of the embedding head after training (fewshot.json; "
                         "zero-shot vs adapted recall@1 and map@1000, mean ± 95% CI over episodes).")


@hookimpl
def register_commands(app: Any) -> None:
    """Add ``dmlplug oodml splits | run | summarize`` and ``dmlplug fewshot``."""
    import typer

    from dmlplug_builtins.oodml import commands

    oodml = typer.Typer(help="ooDML benchmark: generate splits, sweep a recipe over them, summarise with AGS.",
                        no_args_is_help=True)
    oodml.command("splits")(commands.cmd_oodml_splits)
    oodml.command("run")(commands.cmd_oodml_run)
    oodml.command("summarize")(commands.cmd_oodml_summarize)
    app.add_typer(oodml, name="oodml")
    app.command("fewshot")(commands.cmd_fewshot)


@hookimpl
def on_run_start(run: RunView) -> None:
    """Tell the run's few-shot evaluators that they belong to a training run."""
    for evaluator in _fewshot_evaluators(run):
        evaluator.start(run)


@hookimpl
def on_run_end(run: RunView, status: str, error: BaseException | None) -> None:
    """Run the few-shot protocol of every ``fewshot`` evaluator of a completed run."""
    for evaluator in _fewshot_evaluators(run):
        evaluator.finish(run, status)


@hookimpl
def report_section(groups: Sequence[Any], metrics: Sequence[str], figure_dir: Path | None) -> ReportSection | None:
    """Split FIDs, AGS per metric and the metric-vs-FID figure of runs trained on ooDML splits."""
    from dmlplug_builtins.oodml.report import oodml_section

    return oodml_section(groups, metrics, figure_dir)


def _fewshot_evaluators(run: RunView) -> list[Any]:
    from dmlplug_builtins.oodml.evaluator import FewShotEvaluator

    return [c for c in run.components.values() if isinstance(c, FewShotEvaluator)]
