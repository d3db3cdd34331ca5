"""The recipe's structure: one pydantic model per section, and the engine's options of component tables.

Only structure and types live here. Component tables (``[loss]``, ``[data.dataset]`` …) are plain dicts at
this level, and ``[optimizer]`` / ``[scheduler]`` keep every key besides their engine options as they are;
:mod:`dmlplug.recipe.loading` validates them against the registry. The keys of a component table that
belong to the engine, not to the component, are one ``Params`` model per section (:data:`ENGINE_OPTIONS`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from dmlplug.knn_backends import KNN_BACKEND_HELP, KNN_BACKENDS
from dmlplug.params import Params


class RunSection(Params):
    """``[run]``: what the run is called, how long it trains and where it runs."""

    name: str = Field("run", min_length=1, description="Run name; the run directory is <output_dir>/<name>/<time>.")
    seed: int = Field(0, ge=0, description="Seed for python, numpy, torch and DataLoader workers.")
    epochs: int = Field(10, ge=0, description="Training epochs (0 = evaluate the untrained model only).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available, else cpu.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="Autocast precision on CUDA (bf16/fp16); CPU runs always use fp32."
    )
    output_dir: str = Field("runs", description="Parent folder of run directories.")
    grad_clip: float | None = Field(None, gt=0, description="Clip the gradient norm to this value (None = off).")
    log_every: int = Field(10, ge=1, description="Write training losses to loggers every N steps.")
    checkpoint_every_steps: int | None = Field(
        None, ge=1, description="Also write checkpoints/last.pt every N optimizer steps inside an epoch, so that "
        "--resume continues exactly mid-epoch (None = only after each epoch).",
    )
    deterministic: bool = Field(
        False, description="Strict determinism on GPU: torch.use_deterministic_algorithms, deterministic cuDNN "
        "(slower; CPU runs are deterministic already).",
    )
    compile: bool = Field(False, description="torch.compile the model for training (worth it on CUDA).")
    channels_last: bool = Field(
        False, description="Channels-last memory format for the model and its inputs (faster convolutions on CUDA).",
    )


class DataSection(Params):
    """``[data]``: dataset, sampler and loading."""

    dataset: dict[str, Any] = Field(description="Dataset component table: name + its parameters.")
    sampler: dict[str, Any] = Field(
        default_factory=lambda: {"name": "m_per_class", "m": 4},
        description="Batch sampler component table: name + its parameters.",
    )
    batch_size: int = Field(64, ge=2, description="Training batch size.")
    eval_batch_size: int = Field(256, ge=1, description="Batch size when embedding images for evaluation.")
    workers: int = Field(0, ge=0, description="DataLoader worker processes.")
    image_size: int = Field(224, ge=8, description="Side length of the network input.")
    resize_size: int | None = Field(None, ge=8, description="Shorter-side resize before the test centre crop.")
    augment: str | dict[str, Any] = Field(
        "auto", description="Training augmentation: a registered one (`dmlplug list augmentations`: dml, light, "
        'none …), as a name or a table {name = "...", ...}; auto = what the dataset suits (its default_augment).'
    )
    train_classes: list[str] | None = Field(
        None, description="Re-split the dataset by class name: these classes (from all its images) train.")
    test_classes: list[str] | None = Field(
        None, description="With train_classes: the test classes (labels follow the list order).")
    val_classes: list[str] | None = Field(
        None, description="With train_classes: optional validation classes.")

    @field_validator("augment", mode="before")
    @classmethod
    def _augment_name_or_table(cls, value: Any) -> Any:
        if not isinstance(value, (str, dict)):
            raise ValueError('a registered augmentation name ("dml", `dmlplug list augmentations`), "auto", or a '
                             '{name = "...", ...} table')
        return value

    @model_validator(mode="after")
    def _class_selection(self) -> DataSection:
        if (self.train_classes is None) != (self.test_classes is None):
            raise ValueError("train_classes and test_classes go together")
        if self.val_classes is not None and self.train_classes is None:
            raise ValueError("val_classes needs train_classes and test_classes")
        return self


class GroupOverride(Params):
    """``[optimizer.groups.<name>]``: learning rate / weight decay of one parameter group."""

    lr: float | None = Field(None, gt=0, description="Absolute learning rate of the group.")
    lr_mult: float | None = Field(None, gt=0, description="Multiplier of the optimizer's lr.")
    weight_decay: float | None = Field(None, ge=0, description="Weight decay of the group.")

    @model_validator(mode="after")
    def _one_lr(self) -> GroupOverride:
        if self.lr is not None and self.lr_mult is not None:
            raise ValueError("give either lr or lr_mult, not both")
        return self


class OptimizerOptions(Params):
    """The engine's keys of ``[optimizer]``: they shape the parameter groups the optimizer is built over."""

    lr: float = Field(1e-4, gt=0, description="Base learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="Default weight decay.")
    groups: dict[str, GroupOverride] = Field(
        default_factory=dict,
        description="Overrides per parameter group: backbone, head, loss, or a regularizer's group name.",
    )


class _OptimizerName(Params):
    # A base of its own so that `name` comes first in OptimizerSection (pydantic orders the fields of the bases
    # from the last one) and OptimizerOptions stays the engine's keys only.
    name: str = Field("adam", min_length=1, description="A registered optimizer (`dmlplug list optimizers`; "
                      "built in: adam, adamw, sgd). Every key of [optimizer] besides name, lr, weight_decay and "
                      "groups is a parameter of that optimizer (adam, adamw: betas; sgd: momentum, nesterov).")


class OptimizerSection(OptimizerOptions, _OptimizerName):
    """``[optimizer]``: a registered optimizer and its parameters, learning rate, weight decay, group overrides."""

    # The optimizer's own parameters: validated against its Params by dmlplug.recipe.loading.
    model_config = ConfigDict(extra="allow")


class SchedulerSection(Params):
    """``[scheduler]``: a registered learning-rate schedule and its parameters, stepped once per epoch."""

    # The schedule's own parameters: validated against its Params by dmlplug.recipe.loading.
    model_config = ConfigDict(extra="allow")

    name: str = Field(
        "none", min_length=1,
        description="A registered schedule (`dmlplug list lr_schedules`; built in: none, step, multistep, cosine, "
        "plateau). Every other key of [scheduler] is a parameter of that schedule (step: step_size, gamma; "
        "multistep: milestones, gamma; cosine: warmup_epochs, min_lr; plateau: gamma, patience, min_lr). It is "
        "stepped after every epoch with the selection metric, signed so that larger is better ([evaluation] "
        "mode); plateau decays after patience evaluations without improvement, and needs a selection metric "
        "(validation classes, or select_on = \"test\" said explicitly).")


class EvaluationSection(Params):
    """``[evaluation]``: when to evaluate, which split and metric select the best checkpoint, which split reports."""

    every: int = Field(1, ge=1, description="Evaluate every N epochs (and always after the last).")
    initial: bool = Field(True, description="Evaluate the untrained model before training (a baseline: it is not "
                                            "a candidate for best.pt unless select_initial).")
    metric: str = Field("recall@1", description="Metric that selects best.pt.")
    mode: Literal["max", "min"] = Field("max", description="Whether a larger metric is better.")
    select_on: Literal["auto", "val", "test", "last"] = Field(
        "auto", description="What selects best.pt: val (the validation split's evaluations), last (the last "
        "epoch's model, chosen by no evaluation), test (the test split's evaluations: only when written here, and "
        "then labelled as selected on test wherever its numbers show); auto = val when the dataset has a "
        "validation split, else last (results.json says which: selected_on; `dmlplug validate` says why). "
        "Formerly `split`, still accepted.")
    report_on: Literal["test", "val"] = Field(
        "test", description="Split whose metrics the run reports (results.json initial_metrics, metrics, "
        "best_metrics = the selected checkpoint evaluated on it). When it is not the selection split it never "
        "selects: it is evaluated before training, after the last epoch and, at the end, for best.pt.")
    report_curve: bool = Field(
        False, description="When the report split is not the selection split: evaluate it at every evaluation too "
        "(its learning curve in metrics.jsonl and the loggers; it still never selects).")
    select_initial: bool = Field(
        False, description="Let the untrained model's evaluation (epoch 0) be selected as best.pt; off, it is a "
        "baseline only and best.pt is a trained checkpoint.")
    backend: Literal[KNN_BACKENDS] = Field(  # type: ignore[valid-type]  # the one list, see knn_backends
        "auto", description="kNN backend: " + ", ".join(KNN_BACKENDS) + ". " + KNN_BACKEND_HELP + ".")
    memory_budget_mb: int | None = Field(None, ge=16, description="Memory budget of the kNN search.")
    pictures: bool = Field(True, description="At every evaluation, PNG grids of queries with their top-k "
                                             "neighbours (the worst by average precision, and a fixed random "
                                             "sample) in the run's pictures folder and TensorBoard; image "
                                             "datasets only.")
    pictures_queries: int = Field(16, ge=1, le=64, description="Queries (rows) in each retrieval picture.")
    pictures_k: int = Field(5, ge=1, le=20, description="Neighbours shown per query in the retrieval pictures.")
    rerank: list[Any] = Field(
        default_factory=list, description="Re-rankers whose kNN metrics are reported besides the plain ones, as "
        "<metric>+<label> (e.g. recall@1+aqe): tables {name = \"aqe\", parameters..., label = ...} of a registered "
        "re-ranker (`dmlplug list rerankers`) or \"name:k=v,...\" strings; one table alone is accepted too. See "
        "docs/reranking.md.")

    @model_validator(mode="before")
    @classmethod
    def _former_split_key(cls, data: Any) -> Any:
        # `split` was the name of `select_on`; recipes and commands written with it keep their meaning.
        if isinstance(data, dict) and "split" in data:
            if "select_on" in data:
                raise ValueError("give select_on only: split is its former name (fix: remove split)")
            data = {**data, "select_on": data["split"]}
            del data["split"]
        return data

    @field_validator("rerank", mode="before")
    @classmethod
    def _one_method_is_a_list(cls, value: Any) -> Any:
        # The re-rankers are validated with the components, against the recipe's registry (recipe.loading).
        return value if isinstance(value, list) else [value]

    @model_validator(mode="after")
    def _report_is_not_selected_on_test(self) -> EvaluationSection:
        if self.select_on == "test" and self.report_on == "val":
            raise ValueError('select_on = "test" with report_on = "val" reports validation numbers of a checkpoint '
                             'chosen on the test split (fix: select_on = "val" or "auto", or report_on = "test")')
        if self.select_initial and not self.initial:
            raise ValueError("select_initial = true needs the initial evaluation (fix: initial = true, or "
                             "select_initial = false)")
        return self


class Recipe(Params):
    """A whole recipe. Component sections are tables with a ``name`` and the component's parameters."""

    run: RunSection = Field(default_factory=RunSection, description="Run settings.")
    data: DataSection = Field(description="Data settings.")
    backbone: dict[str, Any] = Field(description="Backbone component table.")
    head: dict[str, Any] = Field(
        default_factory=lambda: {"name": "linear"}, description="Head component table."
    )
    loss: dict[str, Any] = Field(description="Loss component table (+ `weight`).")
    miner: dict[str, Any] | None = Field(None, description="Optional miner component table.")
    regularizers: list[dict[str, Any]] = Field(
        default_factory=list, description="Regularizer tables (+ `weight`)."
    )
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection, description="Optimizer.")
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection, description="LR schedule.")
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection, description="Evaluation.")
    evaluators: list[dict[str, Any]] = Field(
        default=[{"name": "recall", "k": [1, 2, 4, 8]}, {"name": "map_at_r"}],
        description="Evaluator tables.",
    )
    loggers: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"name": "console"}, {"name": "tensorboard"}], description="Logger tables."
    )


class BackboneOptions(Params):
    """The engine's keys of ``[backbone]``."""

    warmup_epochs: int = Field(0, ge=0, strict=True,
                               description="The backbone is frozen (no gradients) for the first N epochs.")


class LossOptions(Params):
    """The engine's keys of ``[loss]``."""

    weight: float = Field(1.0, ge=0, strict=True, description="The loss enters the total as weight * loss.")
    embedding: str = Field("", strict=True, description='Multi-head model: the named embedding the loss and '
                           'miner train on ("" = the evaluation embedding).')


class RegularizerOptions(Params):
    """The engine's keys of each ``[[regularizers]]`` table."""

    weight: float = Field(1.0, ge=0, strict=True,
                          description="Each regularizer term enters the total as weight * term.")


#: Recipe section -> the model of the keys of its table that belong to the engine, not to the component
#: (``[loss] weight``). The loader validates them with it; the engine reads ``spec.options.weight``.
ENGINE_OPTIONS: dict[str, type[Params]] = {
    "backbone": BackboneOptions,
    "loss": LossOptions,
    "regularizers": RegularizerOptions,
    "optimizer": OptimizerOptions,
}

#: Recipe section of a component table -> its registry kind (``"data.dataset"`` -> ``"datasets"``).
SECTION_KIND = {
    "backbone": "backbones",
    "head": "heads",
    "loss": "losses",
    "miner": "miners",
    "regularizers": "regularizers",
    "evaluators": "evaluators",
    "loggers": "loggers",
    "data.dataset": "datasets",
    "data.sampler": "samplers",
    "data.augment": "augmentations",
    "optimizer": "optimizers",
    "scheduler": "lr_schedules",
}
