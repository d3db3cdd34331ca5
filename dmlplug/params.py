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


class NoParams(Params):
    """Parameters of a component that takes none."""
