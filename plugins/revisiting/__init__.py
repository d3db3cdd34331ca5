"""The Revisiting-DML margin loss and triplet miners (docs/methods/revisiting.md), written from their definitions.

* Loss ``margin``: margin loss with learnable per-class β (§8.5; PML's own class is ``pml_margin``).
* Miners ``distance_weighted`` (§8.2; PML's is ``pml_distance_weighted``), ``rho_distance`` (§8.4),
  ``semihard``, ``softhard`` and ``random_triplets`` (§8.3). "R-Margin" is ``loss = margin`` with
  ``miner = rho_distance``.

This module holds the Params, the factories and the registration hooks and stays torch-free; the loss
lives in :mod:`.margin`, the miners in :mod:`.miners` (both imported by the factories).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl

#: The optimizer group of the Margin loss's learnable β (declared to validate, built by the loss).
BETA_GROUP = "beta"


class MarginParams(Params):
    """Parameters of loss 'margin' (Revisiting-DML, docs/methods/revisiting.md)."""

    margin: float = Field(0.2, ge=0, description="Triplet margin alpha.")
    beta: float = Field(1.2, description="Initial class boundary beta_0 (Revisiting: 1.2, alternative 0.6).")
    learn_beta: bool = Field(True, description="Learn beta (own parameter group, no weight decay).")
    per_class_beta: bool = Field(True, description="One beta per training class, else one shared beta.")
    nu: float = Field(0.0, ge=0, description="Weight of the beta regulariser nu * sum(beta_{y_a}).")
    normalizer: Literal["terms", "triplets"] = Field(
        "terms", description='Divide by the number of positive hinge terms ("terms", Wu et al. 2017/PML) or of '
                             'triplets with a positive term ("triplets", the reference code).')

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """The learnable β form the group :data:`BETA_GROUP` (no weight decay)."""
        return (BETA_GROUP,) if self.learn_beta else ()


class DistanceWeightedParams(Params):
    """Parameters of miner 'distance_weighted' (docs/methods/revisiting.md)."""

    lower_cutoff: float = Field(0.5, gt=0, lt=2, description="Lower distance cut-off lambda.")
    upper_cutoff: float | None = Field(
        None, gt=0, description="Never sample negatives at or beyond this distance (paper 1.4; off in the code).")
    anchors: Literal["all", "with_positive"] = Field(
        "all", description='"all" (Revisiting; lone samples are their own positive) or "with_positive" '
                           "(DiVA/ooDML).")


class RhoDistanceParams(DistanceWeightedParams):
    """Parameters of miner 'rho_distance' (docs/methods/revisiting.md)."""

    p_switch: float = Field(0.2, ge=0, le=1, description="Probability of the (a, a, same-class) negative swap.")


class SemihardParams(Params):
    """Parameters of miner 'semihard' (docs/methods/revisiting.md)."""

    margin: float = Field(0.2, gt=0, description="Semi-hard band width (the loss's triplet margin).")


class RandomTripletsParams(Params):
    """Parameters of miner 'random_triplets' (docs/methods/revisiting.md)."""

    num_triplets: int | None = Field(None, gt=0, description="Triplets per batch (default: the batch size).")


def build_margin(params: MarginParams, ctx: BuildContext) -> Any:
    """Margin loss with learnable beta."""
    from dmlplug_builtins.revisiting.margin import RevisitingMarginLoss

    return RevisitingMarginLoss(num_classes=ctx.require("num_classes"), **params.model_dump())


def build_miner(class_name: str, params: Params, ctx: BuildContext) -> Any:
    """Factory of the Revisiting-DML miners: the class ``class_name`` of :mod:`.miners` with ``params``."""
    from dmlplug_builtins.revisiting import miners

    return getattr(miners, class_name)(**params.model_dump())


_MARGIN_TAGS = ("uses_tuples", "has_parameters", "needs_num_classes")
#: (name, class in .miners, Params, description, aliases) of every miner.
_MINERS = (
    ("distance_weighted", "DistanceWeightedMiner", DistanceWeightedParams,
     "Distance-weighted triplets exactly as Revisiting-DML (docs/methods/revisiting.md); one triplet per anchor.", ()),
    ("rho_distance", "RhoDistanceMiner", RhoDistanceParams,
     "Distance-weighted triplets with the rho-regularisation swap (Roth et al. 2020); R-Margin = margin + this.",
     ("rho",)),
    ("semihard", "SemihardMiner", SemihardParams,
     "Revisiting semi-hard triplets: one random positive, a negative in (d_ap, d_ap + margin) (Roth et al. 2020).",
     ("semihard_revisiting",)),
    ("softhard", "SofthardMiner", Params,
     "Revisiting soft-hard triplets: random hard positive and hard negative per anchor (docs/methods/revisiting.md).",
     ("softhard_revisiting",)),
    ("random_triplets", "RandomTripletMiner", RandomTripletsParams,
     "Valid triplets drawn uniformly without replacement (docs/methods/revisiting.md).", ("random",)),
)


@hookimpl
def register_losses(register: Any) -> None:
    """The Revisiting margin loss."""
    register("margin", build_margin, params=MarginParams, tags=_MARGIN_TAGS,
             description="Margin loss with learnable per-class beta (Wu et al. 2017), exactly as Revisiting-DML "
                         "(Roth et al. 2020; docs/methods/revisiting.md).",
             aliases=("revisiting_margin",))


@hookimpl
def register_miners(register: Any) -> None:
    """The Revisiting-DML triplet miners."""
    for name, class_name, model, description, aliases in _MINERS:
        register(name, partial(build_miner, class_name), params=model, description=description,
                 aliases=aliases, tags=("triplets", "rho_swap") if name == "rho_distance" else ("triplets",))
