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

    # Validate-time hooks: each lets ``dmlplug validate`` check, without building anything, a mistake that
    # would otherwise surface only once a run has started. ``None`` always means "unknown": the check is
    # skipped and the engine checks again when it builds the component.

    def metric_names(self) -> tuple[str, ...] | None:
        """Evaluators: the metric names :meth:`evaluate` returns with these parameters.

        ``dmlplug validate`` checks ``[evaluation] metric`` against the names of all the recipe's evaluators
        (with "did you mean"). ``()`` declares an evaluator that contributes no per-epoch metric; the
        default ``None`` (not declared) skips the check for the whole recipe.
        """
        return None

    def has_validation_split(self) -> bool | None:
        """Datasets: whether the built dataset will have a ``val`` split, judged from the parameters alone.

        ``dmlplug validate`` rejects ``[evaluation] split = "val"`` when this is ``False``; ``None`` (the
        default) leaves the check to the run, right after the dataset is built.
        """
        return None

    def batch_size_multiple(self) -> int | None:
        """Samplers: the training batch size must be a multiple of this (``m_per_class``: ``m``).

        ``dmlplug validate`` checks ``[data] batch_size`` against it; ``None`` (the default): any size.
        """
        return None

    def optimizer_group_names(self, section: str) -> tuple[str, ...] | None:
        """Trainable components: the names of the optimizer parameter groups the built component has.

        ``section`` is the group name the engine gives a component without ``optimizer_param_groups()``:
        ``"backbone"``, ``"head"``, ``"loss"``, or the regularizer's name. A component whose module defines
        ``optimizer_param_groups()`` returns the names it uses there (a superset is fine: the engine checks
        the built groups again). ``dmlplug validate`` checks the keys of ``[optimizer.groups.<name>]``
        against the names of all the recipe's components; the default ``None`` (not declared) skips it.
        """
        return None

    def head_embeddings(self) -> dict[str, str] | None:
        """Components that read named head outputs: ``{parameter: output name}`` (DiVA's ``*_head``).

        ``dmlplug validate`` checks each name against the head's declared outputs (the ``multi`` head's
        ``heads`` table), with "did you mean"; the default ``None`` (not declared) skips the check.
        """
        return None


class NoParams(Params):
    """Parameters of a component that takes none."""
