"""The recipe's structure: one pydantic model per section, and the engine's keys of component tables.

Only structure and types live here. Component tables (``[loss]``, ``[data.dataset]`` …) are plain dicts at
this level; :mod:`dmlplug.recipe.loading` validates them against the registry.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dmlplug.errors import RecipeError
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
    augment: Literal["auto", "dml", "light", "none"] = Field(
        "auto", description="Training augmentation; auto = what the dataset suits."
    )
    train_classes: list[str] | None = Field(
        None, description="Re-split the dataset by class name: these classes (from all its images) train.")
    test_classes: list[str] | None = Field(
        None, description="With train_classes: the test classes (labels follow the list order).")
    val_classes: list[str] | None = Field(
        None, description="With train_classes: optional validation classes.")

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


class OptimizerSection(Params):
    """``[optimizer]``: optimizer and per-group overrides."""

    name: Literal["adam", "adamw", "sgd"] = Field("adam", description="Optimizer.")
    lr: float = Field(1e-4, gt=0, description="Base learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="Default weight decay.")
    momentum: float = Field(0.9, ge=0, description="SGD momentum.")
    nesterov: bool = Field(False, description="SGD Nesterov momentum.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam/AdamW betas.")
    groups: dict[str, GroupOverride] = Field(
        default_factory=dict,
        description="Overrides per parameter group: backbone, head, loss, or a regularizer's group name.",
    )


class SchedulerSection(Params):
    """``[scheduler]``: learning-rate schedule, stepped once per epoch (plateau: on the selection metric)."""

    name: Literal["none", "step", "multistep", "cosine", "plateau"] = Field("none", description="Schedule.")
    step_size: int = Field(30, ge=1, description="step: epochs between decays.")
    milestones: list[int] = Field(default_factory=list, description="multistep: epochs at which to decay.")
    gamma: float = Field(0.1, gt=0, description="Decay factor (step, multistep, plateau).")
    warmup_epochs: int = Field(0, ge=0, description="cosine: linear warm-up epochs.")
    min_lr: float = Field(0.0, ge=0, description="cosine/plateau: lower bound of the lr.")
    patience: int = Field(5, ge=0, description="plateau: epochs without improvement before decaying.")


class EvaluationSection(Params):
    """``[evaluation]``: when to evaluate and which metric selects the best checkpoint."""

    every: int = Field(1, ge=1, description="Evaluate every N epochs (and always after the last).")
    initial: bool = Field(True, description="Evaluate the untrained model before training.")
    metric: str = Field("recall@1", description="Metric that selects best.pt.")
    mode: Literal["max", "min"] = Field("max", description="Whether a larger metric is better.")
    split: Literal["test", "val"] = Field("test", description="Split used for model selection.")
    backend: Literal[KNN_BACKENDS] = Field(  # type: ignore[valid-type]  # the one list, see knn_backends
        "auto", description="kNN backend: " + ", ".join(KNN_BACKENDS) + ". " + KNN_BACKEND_HELP + ".")
    memory_budget_mb: int | None = Field(None, ge=16, description="Memory budget of the kNN search.")
    pictures: bool = Field(True, description="At every evaluation, PNG grids of queries with their top-k "
                                             "neighbours (the worst by average precision, and a fixed random "
                                             "sample) in the run's pictures folder and TensorBoard; image "
                                             "datasets only.")
    pictures_queries: int = Field(16, ge=1, le=64, description="Queries (rows) in each retrieval picture.")
    pictures_k: int = Field(5, ge=1, le=20, description="Neighbours shown per query in the retrieval pictures.")


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
        default_factory=lambda: [{"name": "recall", "k": [1, 2, 4, 8]}, {"name": "map_at_r"}],
        description="Evaluator tables.",
    )
    loggers: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"name": "console"}, {"name": "tensorboard"}], description="Logger tables."
    )


#: Keys of a component table that belong to the engine, not to the component's params.
ENGINE_KEYS: dict[str, dict[str, Any]] = {
    "backbone": {"warmup_epochs": 0},
    # embedding: name of a multi-head model's named embedding the loss and miner train on ("" = the
    # evaluation embedding).
    "loss": {"weight": 1.0, "embedding": ""},
    "regularizers": {"weight": 1.0},
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
}

#: ``[data]`` keys of the ooDML splits, now parameters of the ``oodml_split`` dataset.
MOVED_DATA_KEYS = ("split_file", "split_id", "split_part")


def check_moved_keys(raw: Any, where: str) -> None:
    """Name the new form when a recipe still uses the ooDML ``[data]`` split keys.

    Runs on the raw dict before validation, so the user reads where the keys went instead of a bare
    "unknown key". A lone ``split_part = "zero_shot"`` (the old default) is removed from ``raw`` in place.

    Raises:
        RecipeError: ``[data]`` holds ``split_file``, ``split_id`` or ``split_part``.
    """
    data = raw.get("data") if isinstance(raw, dict) else None
    if not isinstance(data, dict):
        return
    found = [key for key in MOVED_DATA_KEYS if key in data]
    # Resolved recipes written before the move always hold the default split_part = "zero_shot", which
    # meant nothing without split_file; dropping it keeps those run directories resumable.
    if found == ["split_part"] and data["split_part"] == "zero_shot":
        del data["split_part"]
        return
    if found:
        raise RecipeError(
            '[data] split_file/split_id/split_part moved: use [data.dataset] name = "oodml_split" with '
            "split_file, split_id, part and the wrapped dataset as a table: "
            'dataset = { name = "cub200", root = "..." }',
            where=f"{where}: [data] " + ", ".join(found),
            fix="move these keys into [data.dataset] as shown (see `dmlplug list datasets --params`)",
        )
