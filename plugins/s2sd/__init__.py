"""Built-in regularizer ``s2sd``: Simultaneous Similarity-based Self-Distillation (Roth et al., 2021).

This module declares the parameters and registers the factory; the torch implementation is
:mod:`.regularizer`, imported when the factory runs, so loading the plugin stays torch-free.
See docs/methods/s2sd.md.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from dmlplug import BuildContext, ComponentTable, Params, TableOf, hookimpl
from dmlplug.errors import ComponentError

WHERE = "regularizers: s2sd"


#: Optimizer groups of the target heads and of the target criteria (declared to validate, built by S2SD).
HEADS_GROUP, CRITERIA_GROUP = "s2sd", "s2sd_criteria"


class S2sdParams(Params):
    """Parameters of the S2SD regularizer (defaults: the reference ``parameters.py``, docs/methods/s2sd.md)."""

    target_dims: list[int] = Field(
        default_factory=lambda: [512, 1024, 1536, 2048], min_length=1,
        description="Dimensions D_k of the auxiliary target heads (ooDML runs: [1024, 1536, 2048]).",
    )
    temperature: float = Field(1.0, gt=0.0, description="Softmax temperature T of the similarity distillation.")
    distill_weight: float = Field(50.0, ge=0.0, description="w: weight of the mean target-to-base KL (SOP ooDML: 5).")
    target_weight: float = Field(
        0.5, ge=0.0,
        description="Weight of the mean target loss; 0.5 with [loss] weight = 0.5 gives the reference "
                    "0.5 * (L_src + mean L_tgt).",
    )
    feature_distill: bool = Field(
        False, description="Also distil the pooled backbone features' similarities (sample runs: on).")
    feature_weight: float = Field(50.0, ge=0.0, description="w_f: weight of the feature distillation (SOP: 5).")
    feature_delay: int = Field(
        1000, ge=0, description="Training iterations before the feature distillation starts (ooDML runs: 0).")
    pool_aggr: bool = Field(
        False, description="Targets read avgpool + maxpool of the backbone feature map instead of the pooled "
                           "features (sample runs: on for CUB/CARS); needs a backbone with a feature map.")
    criterion: Annotated[ComponentTable, TableOf("losses")] | None = Field(
        None, description="Loss table {name = ..., ...} of the target criteria (default: the recipe's [loss], "
                          "one fresh instance per target head, sized for the target's dimension).")
    use_miner: bool = Field(
        True, description="Apply (a fresh instance of) the recipe's [miner] to each target embedding too.")
    lr_mult: float = Field(
        1.0, gt=0.0, description="lr multiplier of the groups s2sd (target heads) and s2sd_criteria.")
    weight_decay: float = Field(0.0, ge=0.0, description="Weight decay of those groups (reference: none).")

    def extra_requires(self) -> tuple[str, ...]:
        """The pooled features always; the feature map when the targets pool it themselves."""
        return ("features", "feature_map") if self.pool_aggr else ("features",)

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """Target heads (:data:`HEADS_GROUP`) and the target criteria's own parameters (:data:`CRITERIA_GROUP`)."""
        return (HEADS_GROUP, CRITERIA_GROUP)


def build_s2sd(params: S2sdParams, ctx: BuildContext) -> Any:
    """Build the S2SD regularizer: target heads on the backbone features, one criterion instance each.

    The target criteria are, in this order of preference: the ``criterion`` table built through the run's
    registry; fresh instances of the recipe's ``[loss]`` (:meth:`dmlplug.BuildContext.rebuild`); copies of
    the context's loss, when it has no parameters sized for the base embedding (outside a run).

    Raises:
        ComponentError: The feature size is unknown, the ``criterion`` table is invalid, or no criterion can
            be made (outside a run, with a loss that has embedding-sized parameters and no ``criterion``).
    """
    feature_dim = ctx.require("feature_dim")

    def make_criterion(dim: int) -> Any:
        if params.criterion is not None:
            return ctx.build("loss", params.criterion, where="regularizers.s2sd.criterion", embedding_size=dim)
        criterion = ctx.rebuild("loss", embedding_size=dim)
        return criterion if criterion is not None else _copy_of_context_loss(ctx)

    def make_miner() -> Any:
        # None when the recipe has no [miner]: the targets then use every tuple, as the base loss does.
        return ctx.rebuild("miner")

    from dmlplug_builtins.s2sd.regularizer import S2SD

    return S2SD(
        int(feature_dim), params.target_dims, make_criterion, make_miner if params.use_miner else None,
        temperature=params.temperature, distill_weight=params.distill_weight, target_weight=params.target_weight,
        feature_distill=params.feature_distill, feature_weight=params.feature_weight,
        feature_delay=params.feature_delay, pool_aggr=params.pool_aggr, lr_mult=params.lr_mult,
        weight_decay=params.weight_decay,
    ).to(ctx.device)


def _copy_of_context_loss(ctx: BuildContext) -> Any:
    """A deep copy of ``ctx.loss`` for a target head, when no recipe ``[loss]`` can be rebuilt.

    Raises:
        ComponentError: There is no context loss, or it has parameters (sized for the base embedding).
    """
    import copy

    loss = ctx.loss
    if loss is None or any(True for _ in getattr(loss, "parameters", lambda: iter(()))()):
        raise ComponentError(
            "S2SD cannot make target criteria: no recipe [loss] spec in the context, and the context loss "
            f"({type(loss).__name__}) is missing or has parameters sized for the base embedding",
            where=WHERE, fix='give criterion = {name = "..."} or build S2SD inside a run')
    return copy.deepcopy(loss)


@hookimpl
def register_regularizers(register: Any) -> None:
    """Register ``s2sd``."""
    register(
        "s2sd", build_s2sd, params=S2sdParams,
        description="S2SD: auxiliary high-dimensional target heads trained with the recipe's loss, their batch "
                    "similarities distilled into the base embedding (train time only).",
        requires=("features",),
    )
