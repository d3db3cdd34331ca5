"""Base class for component parameters.

Every registered component declares its parameters as a subclass of :class:`Params`.
The same model drives recipe validation, ``dmlplug list --params`` and the generated docs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """Pydantic model for a component's parameters; unknown keys are rejected.

    Subclass it next to the component's factory and describe every field::

        class MarginParams(Params):
            margin: float = Field(0.2, gt=0, description="Triplet margin alpha.")
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=False)

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

    def has_validation_split(self) -> bool | None:
        """Datasets: whether the built dataset will have a ``val`` split, judged from the parameters alone.

        ``dmlplug validate`` rejects ``[evaluation] split = "val"`` when this is ``False`` (the default: a
        dataset without validation classes). ``None`` says the data decides (a CSV list that may hold
        ``val`` rows): the run checks right after the dataset is built.
        """
        return False

    def batch_size_multiple(self) -> int:
        """Samplers: the training batch size must be a multiple of this (``m_per_class``: ``m``).

        ``dmlplug validate`` checks ``[data] batch_size`` against it; the default ``1``: any size.
        """
        return 1

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
