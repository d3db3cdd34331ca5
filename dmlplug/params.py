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


class NoParams(Params):
    """Parameters of a component that takes none."""
