"""Built-in regularizers: TCM (threshold-consistent margin) and NIR (non-isotropy regularisation).

This module only declares parameters and registers factories; the torch implementations live in
:mod:`.tcm`, :mod:`.nir` and :mod:`.nir_flow` and are imported when a factory runs, so loading the plugin
stays torch-free.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dmlplug import Params, hookimpl
from dmlplug.errors import ComponentError


class TcmParams(Params):
    """Parameters of the TCM regularizer (defaults: METHODS §4.1, PML ``ThresholdConsistentMarginLoss``)."""

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


def build_tcm(params: TcmParams, ctx: Any) -> Any:
    """Build the TCM regularizer module."""
    from dmlplug_builtins.regularizers.tcm import ThresholdConsistentMargin

    return ThresholdConsistentMargin(
        margin_plus=params.margin_plus,
        margin_minus=params.margin_minus,
        lambda_plus=params.lambda_plus,
        lambda_minus=params.lambda_minus,
    )


class NirParams(Params):
    """Parameters of the NIR flow (defaults: the reference runs, METHODS §3.3-3.4)."""

    n_blocks: int = Field(5, ge=1, description="Number of coupling blocks (each: random permutation + GLOW block).")
    subnet_depth: int = Field(8, ge=1, description="Number of Linear layers in each coupling subnet.")
    subnet_width: int = Field(128, ge=1, description="Hidden width of the coupling subnets.")
    clamp: float = Field(
        2.0, gt=0.0, description="Soft clamp of the coupling log-scales: s = clamp * 0.636 * atan(raw)."
    )
    permutation_seed: int = Field(
        0, ge=0, description="Block k permutes coordinates with numpy RandomState(permutation_seed + k)."
    )
    proxy_backprop: bool = Field(
        True, description="Let the flow term send gradients into the proxies (the reference does)."
    )
    lr_mult: float = Field(50.0, gt=0.0, description="Learning-rate multiplier of the flow's optimizer group.")
    weight_decay: float | None = Field(
        0.0, ge=0.0, description="Weight decay of the flow's optimizer group (null: the optimizer's default)."
    )


def build_nir(params: NirParams, ctx: Any) -> Any:
    """Build the NIR flow regularizer, conditioned on the proxies of ``ctx.loss``.

    Raises:
        ComponentError: The recipe's loss is missing or has no class proxies.
    """
    from dmlplug.engine.proxies import class_proxies

    fix = ("use a proxy-based loss (one tagged 'proxies' in `dmlplug list losses`, e.g. ProxyAnchor, "
           "ProxyNCA, SoftTriple) and give its weight omega in [loss] (0.0075 in the reference CUB runs)")
    if ctx is None or ctx.loss is None:
        raise ComponentError("the NIR regularizer needs the recipe's proxy-based loss, but no loss was built",
                             where="regularizers: nir", fix=fix)
    try:
        proxies = class_proxies(ctx.loss)
    except TypeError:
        raise ComponentError(
            f"the NIR regularizer needs class proxies, but the loss {type(ctx.loss).__name__} has none",
            where="regularizers: nir", fix=fix,
        ) from None

    from dmlplug_builtins.regularizers.nir import NonIsotropyRegularizer
    from dmlplug_builtins.regularizers.nir_flow import build_conditional_flow

    proxy_size = int(proxies.shape[1])
    flow = build_conditional_flow(
        ctx.embedding_size or proxy_size,
        proxy_size,
        n_blocks=params.n_blocks,
        subnet_depth=params.subnet_depth,
        subnet_width=params.subnet_width,
        clamp=params.clamp,
        permutation_seed=params.permutation_seed,
    )
    return NonIsotropyRegularizer(
        flow,
        ctx.loss,
        lr_mult=params.lr_mult,
        weight_decay=params.weight_decay,
        proxy_backprop=params.proxy_backprop,
    ).to(ctx.device)


@hookimpl
def register_regularizers(register):
    """Register ``tcm`` and ``nir``."""
    register(
        "tcm", build_tcm, params=TcmParams,
        description="Threshold-consistent margin: hard-pair cosine margins added to any loss.",
    )
    register(
        "nir", build_nir, params=NirParams,
        description="Non-isotropy regularisation: conditional flow around the loss's class proxies.",
        requires=("loss:proxies",),
    )
