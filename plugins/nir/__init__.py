"""Built-in regularizer ``nir``: non-isotropy regularisation (Roth et al., CVPR 2022; docs/methods/nir.md).

This module declares the parameters and registers the factory; the torch implementations are
:mod:`.regularizer` (the flow term) and :mod:`.flow` (the conditional flow), imported when the factory runs,
so loading the plugin stays torch-free.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.errors import ComponentError

WHERE = "regularizers: nir"


#: The optimizer group of the flow's parameters (declared to validate, built by the regularizer).
FLOW_GROUP = "nir"


class NirParams(Params):
    """Parameters of the NIR flow (defaults: the reference runs, docs/methods/nir.md)."""

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

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """The conditional flow's parameters: the group :data:`FLOW_GROUP`."""
        return (FLOW_GROUP,)


def build_nir(params: NirParams, ctx: BuildContext) -> Any:
    """Build the NIR flow regularizer, conditioned on the proxies of ``ctx.loss``.

    Raises:
        ComponentError: The recipe's loss is missing or has no class proxies.
    """
    from dmlplug.proxies import class_proxies

    fix = ("use a proxy-based loss (one tagged 'proxies' in `dmlplug list losses`, e.g. ProxyAnchor, "
           "ProxyNCA, SoftTriple) and give its weight omega in [loss] (0.0075 in the reference CUB runs)")
    if ctx is None or ctx.loss is None:
        raise ComponentError("the NIR regularizer needs the recipe's proxy-based loss, but no loss was built",
                             where=WHERE, fix=fix)
    try:
        proxies = class_proxies(ctx.loss)
    except TypeError:
        raise ComponentError(
            f"the NIR regularizer needs class proxies, but the loss {type(ctx.loss).__name__} has none",
            where=WHERE, fix=fix,
        ) from None

    from dmlplug_builtins.nir.flow import build_conditional_flow
    from dmlplug_builtins.nir.regularizer import NonIsotropyRegularizer

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
def register_regularizers(register: Any) -> None:
    """Register ``nir``."""
    register(
        "nir", build_nir, params=NirParams,
        description="Non-isotropy regularisation: conditional flow around the loss's class proxies.",
        requires=("loss:proxies",),
    )
