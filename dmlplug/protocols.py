"""What the engine may call on each kind of component, and what hooks receive (public API).

Every component kind has a :class:`typing.Protocol` here listing its required members; the optional
*engine services* a component may offer are separate small protocols (:class:`HasOptimizerParamGroups`,
:class:`HasAfterOptimizerStep` …), so the whole contract between plugins and engine is read in this one
file. The engine checks them with ``isinstance`` (they are ``runtime_checkable``). Nothing here imports
torch: tensors and modules are typed ``Any``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from dmlplug.context import BuildContext
    from dmlplug.params import Params

# --------------------------------------------------------------------------------------------------
# Registration

#: The ``Params`` model a factory takes (contravariant: a factory of a base model accepts a subclass).
P_contra = TypeVar("P_contra", bound="Params", contravariant=True)
#: The ``Params`` model given to ``register`` together with a matching factory.
P = TypeVar("P", bound="Params")


class Factory(Protocol[P_contra]):
    """``factory(params, ctx)``: builds one component; imports torch/PML/timm inside its body.

    Annotate both arguments: ``def build_my_loss(params: MyLossParams, ctx: BuildContext) -> MyLoss``; the
    type checker then proves that ``register("my_loss", build_my_loss, params=MyLossParams)`` pairs the
    factory with the model it reads.
    """

    def __call__(self, params: P_contra, ctx: BuildContext, /) -> Any:
        """Build the component from its validated ``Params`` and a :class:`dmlplug.context.BuildContext`."""


class Register(Protocol):
    """The host-owned callback every ``register_<kind>`` hook receives."""

    def __call__(self, name: str, factory: Factory[P], *, params: type[P] | None = None,
                 description: str | None = None, aliases: Sequence[str] = (), tags: Sequence[str] = (),
                 requires: Sequence[str] = ()) -> None:
        """Register ``factory`` under ``name``.

        Args:
            name: The name recipes use.
            factory: ``factory(params, ctx)``.
            params: A :class:`dmlplug.Params` subclass (no parameters when omitted).
            description: One line for ``dmlplug list`` and the generated docs.
            aliases: Other names that resolve to this component.
            tags: Capabilities it offers (``"proxies"``, ``"uses_tuples"``, ``"feature_map"`` …).
            requires: What it needs (``"loss:proxies"``, ``"features"``, ``"views:2"``, ``"ema"`` …).
        """


# --------------------------------------------------------------------------------------------------
# Components: what the engine calls


@runtime_checkable
class Backbone(Protocol):
    """Images -> pooled features and an optional feature map (a ``torch.nn.Module``)."""

    num_features: int

    def __call__(self, images: Any) -> tuple[Any, Any]:
        """Return ``(features B×F, feature_map B×F×h×w or None)``."""


@runtime_checkable
class Head(Protocol):
    """Pooled features -> embedding (a ``torch.nn.Module``); a multi head also has ``eval_embedding``."""

    embedding_size: int

    def __call__(self, features: Any) -> Any:
        """Return a ``B×D`` tensor, or a dict of named embeddings (see :class:`MultiHead`)."""


@runtime_checkable
class MultiHead(Protocol):
    """A head that produces several named embeddings (DiVA); its Params declare them (``head_outputs()``).

    Attributes:
        embedding_size: Size of the evaluation embedding.
        output_sizes: Size of each named embedding, by name, in the declared order.
    """

    embedding_size: int
    output_sizes: Mapping[str, int]

    def __call__(self, features: Any) -> dict[str, Any]:
        """Return the named embeddings."""

    def eval_embedding(self, outputs: dict[str, Any]) -> Any:
        """The embedding used for evaluation and export, from the named outputs."""


@runtime_checkable
class Loss(Protocol):
    """A metric-learning loss in pytorch-metric-learning's calling convention."""

    def __call__(self, embeddings: Any, labels: Any, indices_tuple: Any = None) -> Any:
        """Return a scalar tensor."""


@runtime_checkable
class Miner(Protocol):
    """A tuple miner in pytorch-metric-learning's calling convention."""

    def __call__(self, embeddings: Any, labels: Any) -> tuple[Any, ...]:
        """Return pairs ``(a1, p, a2, n)`` or triplets ``(a, p, n)`` of batch indices."""


@runtime_checkable
class Regularizer(Protocol):
    """An extra loss term computed from the whole training step."""

    def __call__(self, step: Any) -> Any:
        """Return a scalar tensor or ``{name: scalar tensor}`` from a :class:`dmlplug.step.StepOutput`."""


@runtime_checkable
class Evaluator(Protocol):
    """Embeddings -> named metrics, through an :class:`dmlplug.evaluation.EvalContext`."""

    def evaluate(self, eval_context: Any) -> dict[str, float]:
        """Return metric values by name (``recall@1``, ``map@r`` …)."""


@runtime_checkable
class BatchSampler(Protocol):
    """Yields lists of dataset indices; batches depend on ``(seed, epoch)`` only (exact resume)."""

    def __iter__(self) -> Iterator[list[int]]:
        """Yield the batches of the current epoch."""

    def __len__(self) -> int:
        """Number of batches per epoch."""


@runtime_checkable
class Dataset(Protocol):
    """The splits of one dataset (a :class:`dmlplug.data.DatasetBundle`)."""

    train: Any
    test: Any
    val: Any


@runtime_checkable
class Logger(Protocol):
    """A per-run object with ``@hookimpl`` lifecycle hooks; nothing is required (one with no hook hears nothing)."""


@runtime_checkable
class Distance(Protocol):
    """A pairwise distance or similarity in pytorch-metric-learning's convention (a ``BaseDistance``).

    Nested in losses and miners (``[loss.distance] name = "cosine_similarity"``); third-party distances
    subclass ``pytorch_metric_learning.distances.BaseDistance`` so that every PML loss accepts them.
    """

    is_inverted: bool

    def __call__(self, query_emb: Any, ref_emb: Any = None) -> Any:
        """Return the ``Q×R`` matrix (``is_inverted``: larger means more similar)."""


@runtime_checkable
class Reducer(Protocol):
    """Reduces a loss's per-element values to a scalar (a PML ``BaseReducer``)."""

    def __call__(self, loss_dict: Any, embeddings: Any, labels: Any, ref_emb: Any = None,
                 ref_labels: Any = None) -> Any:
        """Return a scalar tensor."""


@runtime_checkable
class Optimizer(Protocol):
    """A ``torch.optim.Optimizer`` over the named parameter groups in :attr:`BuildContext.param_groups`."""

    param_groups: list[dict[str, Any]]

    def step(self, closure: Any = None) -> Any:
        """One optimisation step."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients."""

    def state_dict(self) -> dict[str, Any]:
        """State for checkpoints."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state of a checkpoint."""


@runtime_checkable
class LRSchedule(Protocol):
    """A learning-rate schedule of :attr:`BuildContext.optimizer`, stepped once per epoch by the engine."""

    def step_epoch(self, metric: float | None) -> None:
        """Advance one epoch; ``metric`` is the selection metric of the epoch's evaluation (``None`` if none ran)."""

    def state_dict(self) -> dict[str, Any]:
        """State for checkpoints."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state of a checkpoint."""


@runtime_checkable
class Augmentation(Protocol):
    """A training augmentation policy: image (PIL) -> ``3×S×S`` tensor, ``S`` = :attr:`BuildContext.image_size`."""

    def __call__(self, image: Any) -> Any:
        """Return the augmented, normalised image tensor."""


#: The Protocol every built component of a kind is checked against when it is built.
KIND_PROTOCOLS: dict[str, type] = {
    "backbones": Backbone, "heads": Head, "losses": Loss, "miners": Miner, "regularizers": Regularizer,
    "evaluators": Evaluator, "datasets": Dataset, "samplers": BatchSampler, "loggers": Logger, "distances": Distance,
    "reducers": Reducer, "optimizers": Optimizer, "lr_schedules": LRSchedule, "augmentations": Augmentation,
}


# --------------------------------------------------------------------------------------------------
# Optional engine services a component may offer


@runtime_checkable
class HasOptimizerParamGroups(Protocol):
    """A module that splits its parameters into named optimizer groups of its own.

    Without it, all parameters of a component form one group named after it.
    """

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """Return ``[{"name": str, "params": [...], "lr_mult": float, "weight_decay": float | None}]``."""


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
