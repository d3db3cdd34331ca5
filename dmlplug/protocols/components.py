"""The contract of registration and of every component kind: ``Factory``, ``Register``, one Protocol per kind.

:mod:`dmlplug.protocols.kinds` maps each kind to its Protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
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

    def __call__(self, name: str, factory: Factory[P], *, params: type[P] | Callable[[], type[P]] | None = None,
                 description: str | None = None, aliases: Sequence[str] = (), tags: Sequence[str] = (),
                 requires: Sequence[str] = ()) -> None:
        """Register ``factory`` under ``name``.

        Args:
            name: The name recipes use.
            factory: ``factory(params, ctx)``.
            params: A :class:`dmlplug.Params` subclass (no parameters when omitted), or a function of no arguments
                returning one, called the first time the parameters are read: for a plugin that generates many
                models (the PML adapter), so that loading the host does not make them all.
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
class ImageSplit(Protocol):
    """One split of a dataset: labelled images (a :class:`dmlplug.data.ImageSource`).

    ``labels`` are int64 ``0 .. C-1`` (numpy); ``class_names[label]`` names a class; ``name`` says which split it is
    in messages. The engine reads its length, labels, classes and images, and an ``attributes`` dict when the
    split has one (``super_labels`` for hierarchical samplers).
    """

    labels: Any
    class_names: list[str]
    name: str

    def __len__(self) -> int:
        """The number of images."""

    @property
    def num_classes(self) -> int:
        """The number of classes (``len(class_names)``)."""

    def load_image(self, index: int) -> Any:
        """Image ``index`` as an RGB ``PIL.Image.Image``."""

    def describe(self, index: int) -> str:
        """Where image ``index`` comes from, for error messages."""


@runtime_checkable
class Dataset(Protocol):
    """The splits of one dataset and what the engine reads with them (a :class:`dmlplug.data.DatasetBundle`).

    Attributes:
        train: The training split (:class:`ImageSplit`).
        test: The evaluation split.
        val: The validation split, or ``None``.
        test_query_mask: Boolean mask over ``test`` of the queries, or ``None`` (leave-one-out evaluation).
        test_gallery_mask: Boolean mask over ``test`` of the gallery, or ``None``.
        default_augment: The augmentation ``[data] augment = "auto"`` picks (``"dml"``, ``"light"`` …).
        info: Facts recorded in the run directory (root, layout, counts).
    """

    train: ImageSplit
    test: ImageSplit
    val: ImageSplit | None
    test_query_mask: Any
    test_gallery_mask: Any
    default_augment: str
    info: dict[str, Any]


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
