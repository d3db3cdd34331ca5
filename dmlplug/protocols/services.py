"""The optional engine services a component may offer, and what lifecycle and report hooks receive."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# --------------------------------------------------------------------------------------------------
# Optional engine services a component may offer


@runtime_checkable
class HasOptimizerParamGroups(Protocol):
    """A module that splits its parameters into named optimizer groups of its own.

    Without it, all parameters of a component form one group named after it.
    """

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """Return ``[{"name": str, "params": [...], "lr_mult": float, "weight_decay": float | None}]``.

        A group may add ``"parent": str``: it is then one part of the group declared under that name (a layer of
        a backbone with layer-wise learning rates), which ``[optimizer.groups.<parent>]`` addresses; the part's
        learning rate is the parent's times its ``lr_mult``.
        """


@runtime_checkable
class HasAfterOptimizerStep(Protocol):
    """A loss, miner or regularizer that updates state after every optimizer step (queues, counters)."""

    def after_optimizer_step(self, step: Any) -> None:
        """Called with the :class:`dmlplug.step.StepOutput` of the step just trained."""


@runtime_checkable
class HasSetEpoch(Protocol):
    """A batch sampler whose batches change with the epoch: the engine calls ``set_epoch`` before each one.

    Batches must depend on ``(seed, epoch)`` alone, so a resumed or distributed run draws the same ones.
    """

    def set_epoch(self, epoch: int) -> None:
        """Prepare the batches of ``epoch`` (1-based)."""


@runtime_checkable
class HasEvalCrop(Protocol):
    """An augmentation policy that says how evaluation resizes (default ``True``).

    ``True``: shorter side to ``[data] resize_size``, then a centre crop (the DML protocol); ``False``: a square
    resize of the whole image (small synthetic images: the built-ins ``light`` and ``none``).
    """

    eval_crop: bool


@runtime_checkable
class HasViewAugment(Protocol):
    """An augmentation policy whose extra views (``"views:N"``) use another registered policy (``none``: ``dml``)."""

    view_augment: str


@runtime_checkable
class HasRandomSources(Protocol):
    """An augmentation policy that names the global generators it draws from (default: all three).

    Any of ``"torch"`` (torch's default CPU generator), ``"python"`` (``random``) and ``"numpy"``
    (``np.random``); the engine seeds only these per sample (torchvision's v2 transforms draw from torch only).
    """

    random_sources: frozenset[str]


@runtime_checkable
class HasTensorInput(Protocol):
    """An augmentation policy that says whether it accepts a ``3×H×W`` uint8 tensor as well as a PIL image.

    ``True``: the engine hands it the tensor of a source that has ``load_tensor`` (decoded by
    ``torchvision.io`` or taken straight from an in-memory array, skipping the PIL round trip); ``False``, the
    default: always a PIL image, so a policy written for PIL (e.g. with ``transforms.ToTensor``) works on every
    dataset. The built-ins, ``dmlplug.data.image_ops.TensorPipeline`` and ``normalized_pipeline``'s pipelines
    declare ``True``.
    """

    tensor_input: bool


@runtime_checkable
class HasEmaMomentum(Protocol):
    """A component that requires ``"ema"`` says how fast the engine's EMA model follows the model."""

    ema_momentum: float


@runtime_checkable
class HasRequiredK(Protocol):
    """An evaluator that needs neighbours: the kNN graph is searched once with the largest k asked."""

    def required_k(self, eval_context: Any) -> Any:
        """Return the number of neighbours needed, per query (int array) or overall (int)."""


@runtime_checkable
class HasFigures(Protocol):
    """An evaluator that draws figures (logged to TensorBoard by the built-in logger)."""

    def figures(self, eval_context: Any) -> dict[str, Any]:
        """Return matplotlib figures by name."""


@runtime_checkable
class WritesArtifacts(Protocol):
    """An evaluator that writes files into the run directory after the last evaluation."""

    def write_artifacts(self, eval_context: Any, directory: Path) -> list[Path]:
        """Write the files and return their paths."""


# --------------------------------------------------------------------------------------------------
# What lifecycle hooks receive


@runtime_checkable
class RunView(Protocol):
    """The read-only view of a training run that every lifecycle hook receives.

    Attributes:
        recipe: The validated recipe (sections as attributes: ``run.recipe.run.epochs``); read-only.
        resolved_recipe: The recipe as a plain nested dict, with defaults filled in.
        flat_recipe: The same, flattened to ``{"section.key": value}`` (``"regularizers[0].weight"``), as
            ``dmlplug report`` compares runs and TensorBoard's HParams shows them.
        name: The run name (``[run] name``).
        directory: The run directory.
        checkpoint_dir: ``<directory>/checkpoints``.
        device: ``"cpu"`` or ``"cuda"`` …
        is_main_process: ``True`` in a single-process run and on rank 0 of a distributed one: a hook that
            writes files or does expensive one-off work (few-shot adaptation) does it only there.
        epoch: Current epoch (0 before training, 1-based while training).
        step: Global optimizer step (0 before training).
        steps_per_epoch: Optimizer steps per epoch.
        resumed: Whether this process continued a run from a checkpoint.
        model: The embedding model being trained (backbone → head → L2 normalisation).
        components: Every built component by recipe path (``"data.dataset"``, ``"data.sampler"``,
            ``"backbone"``, ``"head"``, ``"loss"``, ``"miner"``, ``"regularizers[0]"``, ``"evaluators[0]"``,
            ``"loggers[0]"``); the miner is absent when the recipe has none.
        dataset: The :class:`dmlplug.data.DatasetBundle` of the run.
        test_transform: The transform evaluation applies to an image (resize, crop, normalise).
        learning_rates: Current learning rate of every optimizer group, by group name.
        initial_metrics: Metrics of the evaluation before training (empty when none ran).
        latest_metrics: Metrics of the latest evaluation.
        best_metrics: Metrics of the best evaluation so far, by the recipe's selection metric.
        selected_on: What selects ``best.pt``: ``"val"``, ``"last"`` (the last evaluated model, chosen by no
            evaluation) or ``"test"`` (only when the recipe says ``select_on = "test"``; a logger that shows the
            best numbers labels them as selected on test).
        eval_context: The :class:`dmlplug.evaluation.EvalContext` of the latest evaluation, or ``None``.
        latest_pictures: The retrieval pictures of the latest evaluation (``[evaluation] pictures``): PNG path
            by kind, ``"worst"`` (lowest average precision) and ``"sample"`` (fixed random queries); empty
            when none were drawn (pictures off, a dataset without images, other ranks).
    """

    recipe: Any
    resolved_recipe: Mapping[str, Any]
    flat_recipe: Mapping[str, Any]
    name: str
    directory: Path
    checkpoint_dir: Path
    device: str
    is_main_process: bool
    epoch: int
    step: int
    steps_per_epoch: int
    resumed: bool
    model: Any
    components: Mapping[str, Any]
    dataset: Any
    test_transform: Any
    learning_rates: Mapping[str, float]
    initial_metrics: Mapping[str, float]
    latest_metrics: Mapping[str, float]
    best_metrics: Mapping[str, float]
    selected_on: str
    eval_context: Any
    latest_pictures: Mapping[str, Path]




# --------------------------------------------------------------------------------------------------
# What report hooks return


@dataclass
class ReportSection:
    """A section a plugin adds to ``dmlplug report`` (returned by the ``report_section`` hook).

    Attributes:
        title: Section heading.
        markdown: The section body (Markdown).
        columns: Extra table columns: group key -> ``{column name: cell text}``.
        figures: PNG files the section wrote into the report's figure folder.
    """

    title: str
    markdown: str = ""
    columns: dict[str, dict[str, str]] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
