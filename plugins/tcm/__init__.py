"""Built-in regularizer ``tcm``: Threshold-Consistent Margin (Zhang et al., 2023; docs/methods/tcm.md).

This module declares the parameters and registers the factory; the torch implementation is
:mod:`.regularizer`, imported when the factory runs, so loading the plugin stays torch-free.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl


class TcmParams(Params):
    """Parameters of the TCM regularizer (defaults: docs/methods/tcm.md, PML ``ThresholdConsistentMarginLoss``)."""

    margin_plus: float = Field(
        0.9, ge=-1.0, le=1.0,
        description="Positive cosine margin m+: positive pairs with similarity <= m+ are penalised by m+ - s.",
    )
    margin_minus: float = Field(
        0.5, ge=-1.0, le=1.0,
        description="Negative cosine margin m-: negative pairs with similarity >= m- are penalised by s - m-.",
    )
    lambda_plus: float = Field(1.0, ge=0.0, description="Weight lambda+ of the positive (hard-positive) term.")
    lambda_minus: float = Field(1.0, ge=0.0, description="Weight lambda- of the negative (hard-negative) term.")


def build_tcm(params: TcmParams, ctx: BuildContext) -> Any:
    """Build the TCM regularizer module."""
    from dmlplug_builtins.tcm.regularizer import ThresholdConsistentMargin

    return ThresholdConsistentMargin(
        margin_plus=params.margin_plus,
        margin_minus=params.margin_minus,
        lambda_plus=params.lambda_plus,
        lambda_minus=params.lambda_minus,
    )


@hookimpl
def register_regularizers(register: Any) -> None:
    """Register ``tcm``."""
    register(
        "tcm", build_tcm, params=TcmParams,
        description="Threshold-consistent margin: hard-pair cosine margins added to any loss.",
    )
