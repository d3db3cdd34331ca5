"""Base class for component parameters.

Every registered component declares its parameters as a subclass of :class:`Params`.
The same model drives recipe validation, ``dmlplug list --params`` and the generated docs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

#: The fewest classes the training split (a pair loss needs a negative, from another class) and every evaluated
#: split (with one class every neighbour is of the query's class: recall 1.0 before training) may have, and the
#: fewest a batch must hold when the loss learns from pairs. ``dmlplug validate`` checks it where the recipe
#: tells (:meth:`Params.split_sizes`, :meth:`Params.per_class_in_batch`), the run once the data is built
#: (:func:`dmlplug.data.splits.check_split_sizes`).
MIN_SPLIT_CLASSES = 2


@dataclass(frozen=True)
class SplitSize:
    """The size of one split of a dataset as its parameters tell it (:meth:`Params.split_sizes`).

    Attributes:
        classes: Number of classes in the split.
        min_images: Images of the split's smallest class; ``None`` when the parameters cannot tell.
    """

    classes: int
    min_images: int | None = None


class Params(BaseModel):
    """Pydantic model for a component's parameters; unknown keys are rejected.

    Subclass it next to the component's factory and describe every field::

        class MarginParams(Params):
            margin: float = Field(0.2, gt=0, description="Triplet margin alpha.")
    """

    # A field whose key is a Python keyword is declared with an alias (``lam: float = Field(alias="lambda")``):
    # recipes write the alias, and dumps (resolved recipes, tables) write it back.
    # ``defer_build``: a model's validator is built when it first validates, not when its class is defined. Every
    # plugin host defines some 140 Params models and a command validates a handful; building them all made up a
    # third of the host's start-up (docs/performance.md, "Start-up").
    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=False, serialize_by_alias=True,
                              defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a field named like one of Params' methods: it would replace the declaration the host calls.

        pydantic only warns, and the warning surfaces in every command of every user; a plugin author should
        see it once, as an error, when the class is defined.
        """
        super().__pydantic_init_subclass__(**kwargs)
        methods = {name for name, value in vars(Params).items() if callable(value) and not name.startswith("_")}
        clashes = sorted(methods & set(cls.model_fields))
        if clashes:
            raise TypeError(f"{cls.__qualname__}: field(s) {', '.join(clashes)} would replace the Params method(s) "
                            "of the same name that dmlplug calls; rename the field(s)")

    def extra_requires(self) -> tuple[str, ...]:
        """Requirements that depend on parameter values, added to the registered ``requires``.

        Override it when a need exists only for some values (DiVA needs a second view and the EMA model
        only while its MoCo weight is positive: ``return ("views:2", "ema") if self.alpha_ssl > 0 else ()``).
        ``dmlplug validate`` checks them like registered requirements.
        """
        return ()

    def extra_tags(self) -> tuple[str, ...]:
        """Capabilities that depend on parameter values, added to the registered ``tags``.

        A timm backbone offers ``"feature_map"`` only for convolutional models, for example.
        """
        return ()

    # Validate-time declarations: each lets ``dmlplug validate`` check, without building anything, a mistake
    # that would otherwise surface only once a run has started. Every default says what the engine does
    # with a component that declares nothing, so the checks run for every plugin; the plugin kit
    # (``dmlplug.testing``) checks each declaration against what the built component really does.

    def metric_names(self) -> tuple[str, ...]:
        """Evaluators: the metric names :meth:`evaluate` returns with these parameters.

        ``dmlplug validate`` checks ``[evaluation] metric`` against the names of all the recipe's evaluators
        (with "did you mean"). The default ``()`` declares an evaluator that contributes no per-epoch metric
        to select on; ``dmlplug.testing.check_evaluator`` fails when the built evaluator returns names that
        are not declared.
        """
        return ()

    def reads_neighbours(self) -> bool:
        """Evaluators: whether :meth:`evaluate` reads the kNN neighbour list (the built evaluator has ``required_k``).

        ``[evaluation] rerank`` reports the metrics of exactly these evaluators again over the re-ranked list, as
        ``<metric>+<label>``; ``dmlplug validate`` accepts such a name as ``[evaluation] metric`` only for them.
        The default ``False`` declares an evaluator whose metrics do not depend on a neighbour list (clustering,
        pairs); ``dmlplug.testing.check_evaluator`` fails when the built evaluator says otherwise.
        """
        return False

    def has_validation_split(self) -> bool | None:
        """Datasets: whether the built dataset will have a ``val`` split, judged from the parameters alone.

        ``dmlplug validate`` rejects ``[evaluation] split = "val"`` when this is ``False`` (the default: a
        dataset without validation classes). ``None`` says the data decides (a CSV list that may hold
        ``val`` rows): the run checks right after the dataset is built.
        """
        return False

    def validation_parameter(self) -> str | None:
        """Datasets: the parameter that carves class-disjoint validation classes out of the training classes.

        Its value is a fraction of the training classes (``0.25``: a quarter validates). ``dmlplug validate``
        names it when it says why a run selects the last epoch, as the one override that makes the run select on
        validation classes instead (``--set data.dataset.<parameter>=0.25``). The default ``None``: the dataset
        has no such parameter. ``dmlplug.testing.check_dataset`` checks that it is a parameter and that ``0.25``
        gives a validation split.
        """
        return None

    def split_sizes(self) -> dict[str, SplitSize] | None:
        """Datasets: the size of every split the built dataset will have, judged from the parameters alone.

        Keys are the split names (``"train"``, ``"test"``, and ``"val"`` exactly when there is a validation
        split). ``dmlplug validate`` refuses a training split or an evaluated split (``test``, and ``val`` with
        ``[evaluation] split = "val"``) of fewer than two classes (:data:`MIN_SPLIT_CLASSES`),
        and warns when the sampler takes more images of a class per batch than the smallest training class has.
        The default ``None`` says the data decides: the run checks the minimum right after building the
        dataset, before training. ``dmlplug.testing.check_dataset`` compares a declaration with the built splits.
        """
        return None

    def batch_size_multiple(self) -> int:
        """Samplers: the training batch size must be a multiple of this (``m_per_class``: ``m``).

        ``dmlplug validate`` checks ``[data] batch_size`` against it; the default ``1``: any size.
        """
        return 1

    def per_class_in_batch(self) -> int | None:
        """Samplers: how many samples of a class a batch takes at a time (``m_per_class``: ``m``).

        A batch then holds at most ``batch_size // per_class_in_batch()`` classes. ``dmlplug validate`` refuses a
        batch of one class when the loss compares the samples of a batch with each other (a loss without the
        ``proxies`` tag, or any miner: without a second class there is no negative pair), and warns when it
        is larger than the smallest training class (the dataset's :meth:`split_sizes`), whose images then repeat
        in every batch that holds it. The default ``None`` declares a sampler that does not group samples
        by class (``random``), about which nothing is checked. ``dmlplug.testing.check_sampler`` checks that
        every class of every batch has a multiple of this many samples.
        """
        return None

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """Trainable components: the names of the optimizer parameter groups the built component has.

        ``section`` is the group name the engine gives a component without ``optimizer_param_groups()``:
        ``"backbone"``, ``"head"``, ``"loss"``, or the regularizer's name; the default ``(section,)`` is
        exactly that. A component whose module defines ``optimizer_param_groups()`` returns the names it uses
        there. ``dmlplug validate`` checks the keys of ``[optimizer.groups.<name>]`` against the names of all
        the recipe's components; ``dmlplug.testing`` checks the built groups are among the declared ones.
        """
        return (section,)

    def head_outputs(self) -> tuple[str, ...]:
        """Heads: the names of the embeddings the head returns as a dict, in order.

        The default ``()`` declares a head that returns one ``B×D`` tensor. Components that require
        ``"named_embeddings"`` need a head that declares some, and parameters that name head outputs
        (:meth:`head_embeddings`, ``[loss] embedding``) are checked against them;
        ``dmlplug.testing.check_head`` checks the built head returns exactly these names.
        """
        return ()

    def head_embeddings(self) -> dict[str, str]:
        """Components that read named head outputs: ``{parameter: output name}`` (DiVA's ``*_head``).

        ``dmlplug validate`` checks each name against the head's :meth:`head_outputs`, with "did you mean";
        the default ``{}`` reads none.
        """
        return {}


class NoParams(Params):
    """Parameters of a component that takes none."""
