"""Built-in regularizers: TCM, NIR (non-isotropy regularisation), DiVA and S2SD (self-distillation).

This module only declares parameters and registers factories; the torch implementations live in
:mod:`.tcm`, :mod:`.nir` and :mod:`.nir_flow` and are imported when a factory runs, so loading the plugin
stays torch-free.
"""

from __future__ import annotations

from typing import Any, Literal

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


class DivaParams(Params):
    """Parameters of the DiVA regularizer (defaults: the CUB sample runs, METHODS §2.4-2.5)."""

    discriminative_head: str = Field("discriminative", description="Name of the discriminative head (multi head).")
    shared_head: str = Field("shared", description="Name of the shared-feature head.")
    selfsimilarity_head: str = Field("selfsimilarity", description="Name of the self-supervised head.")
    intra_head: str = Field("intra", description="Name of the intra-class head.")
    alpha_shared: float = Field(0.3, ge=0.0, description="Weight of the shared term (CUB 0.3, CARS 0.15, SOP 0.2).")
    alpha_intra: float = Field(0.3, ge=0.0, description="Weight of the intra-class term.")
    alpha_ssl: float = Field(
        0.3, ge=0.0, description="Weight of the self-supervised (MoCo) term; > 0 requires views:2 and ema.")
    rho: list[float] = Field(
        default_factory=lambda: [1500.0], min_length=1,
        description="Decorrelation weights for selfsimilarity, shared, intra -> discriminative (one value: all "
                    "three; CUB 1500, CARS 100, SOP 150).",
    )
    decorrelate: list[Literal["selfsimilarity", "shared", "intra"]] = Field(
        default_factory=lambda: ["selfsimilarity", "shared", "intra"],
        description="Source heads decorrelated from the discriminative one (empty: no decorrelation).",
    )
    temperature: float = Field(0.01, gt=0.0, description="MoCo temperature tau (sample runs 0.01; parameters.py 0.1).")
    n_key_batches: int = Field(
        30, ge=1, description="Key queue length in batches: queue = n_key_batches * batch_size (SOP 70).")
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="EMA momentum m of the key model.")
    negative_normalization: Literal["column", "row"] = Field(
        "column", description='Negative weights normalised per key column ("column", reference default) or per '
                              'query row ("row", --diva_fixed, as in the paper).')
    lower_cutoff: float = Field(0.5, gt=0.0, lt=2.0, description="Lower distance cut-off of the distance weighting.")
    upper_cutoff: float = Field(1.4, gt=0.0, le=2.0, description="Queue keys farther than this get the floor weight.")
    shuffle_keys: bool = Field(True, description="Shuffle the batch for the key forward pass (shuffle-BN).")
    regressor_hidden: int = Field(512, ge=1, description="Hidden width of the decorrelation regressors.")
    margin: float = Field(0.2, ge=0.0, description="Triplet margin of the shared and intra-class Margin losses.")
    beta: float = Field(1.2, description="Initial beta_0 of the shared and intra-class Margin losses.")
    learn_beta: bool = Field(True, description="Learn those betas (group diva_beta, no weight decay).")
    margin_normalizer: Literal["terms", "triplets"] = Field(
        "terms", description="Normalizer of those Margin losses (as loss 'margin').")
    beta_lr_mult: float = Field(
        50.0, gt=0.0, description="lr multiplier of group diva_beta (50 = 5e-4 / 1e-5, METHODS §2.5).")
    regressor_lr_mult: float = Field(1.0, gt=0.0, description="lr multiplier of group diva_regressors (no wd).")

    def extra_requires(self) -> tuple[str, ...]:
        """The self-supervised term needs a second view and the EMA model (not needed with alpha_ssl = 0)."""
        return ("views:2", "ema") if self.alpha_ssl > 0 else ()


def build_diva(params: DivaParams, ctx: Any) -> Any:
    """Build the DiVA regularizer for the recipe's multi head.

    Raises:
        ComponentError: The head lacks one of the four named heads, ``rho`` has the wrong length, or the
            number of classes is unknown.
    """
    roles = {"discriminative": params.discriminative_head, "shared": params.shared_head,
             "selfsimilarity": params.selfsimilarity_head, "intra": params.intra_head}
    head_fix = ("use [head] name = 'multi' with heads = {discriminative = 128, shared = 128, selfsimilarity = 128, "
                "intra = 128}, or point the *_head parameters at its head names")
    layers = getattr(getattr(ctx, "head", None), "heads", None)
    if layers is None:
        raise ComponentError("DiVA needs a multi-head model, but the recipe's head has no named heads",
                             where="regularizers: diva", fix=head_fix)
    missing = [f"{role} ({name!r})" for role, name in roles.items() if name not in layers]
    if missing:
        raise ComponentError(f"DiVA's head(s) {', '.join(missing)} are not heads of the model "
                             f"(it has {sorted(layers)})", where="regularizers: diva", fix=head_fix)
    if len(params.rho) not in (1, len(params.decorrelate)):
        raise ComponentError(f"rho has {len(params.rho)} values for {len(params.decorrelate)} decorrelated heads",
                             where="regularizers: diva rho", fix="give one value, or one per entry of decorrelate")
    num_classes = getattr(ctx, "num_classes", None)
    if not num_classes:
        raise ComponentError("DiVA needs the number of training classes", where="regularizers: diva",
                             fix="build it inside a run, or pass num_classes=...")
    dims = {role: int(layers[name].out_features) for role, name in roles.items()}
    rho = params.rho * len(params.decorrelate) if len(params.rho) == 1 else params.rho
    from dmlplug_builtins.regularizers.diva import DivaRegularizer

    return DivaRegularizer(
        roles, dims, int(num_classes),
        batch_size=getattr(ctx, "batch_size", None),
        alpha_shared=params.alpha_shared, alpha_intra=params.alpha_intra, alpha_ssl=params.alpha_ssl,
        rho=dict(zip(params.decorrelate, rho, strict=True)),
        temperature=params.temperature, n_key_batches=params.n_key_batches, momentum=params.momentum,
        negative_normalization=params.negative_normalization, lower_cutoff=params.lower_cutoff,
        upper_cutoff=params.upper_cutoff, shuffle_keys=params.shuffle_keys, regressor_hidden=params.regressor_hidden,
        margin=params.margin, beta=params.beta, learn_beta=params.learn_beta,
        margin_normalizer=params.margin_normalizer, beta_lr_mult=params.beta_lr_mult,
        regressor_lr_mult=params.regressor_lr_mult,
    ).to(getattr(ctx, "device", "cpu") or "cpu")


class S2sdParams(Params):
    """Parameters of the S2SD regularizer (defaults: the reference ``parameters.py``, METHODS §1.4)."""

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
    criterion: dict[str, Any] | None = Field(
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


def build_s2sd(params: S2sdParams, ctx: Any) -> Any:
    """Build the S2SD regularizer: target heads on the backbone features, one criterion instance each.

    Raises:
        ComponentError: The feature size is unknown, the ``criterion`` table is invalid, or no criterion can
            be made (outside a run, with a loss that has embedding-sized parameters and no ``criterion``).
    """
    import copy
    import dataclasses

    feature_dim = getattr(ctx, "feature_dim", None)
    if not feature_dim:
        raise ComponentError("S2SD needs the size of the backbone features", where="regularizers: s2sd",
                             fix="build it inside a run, or give the context feature_dim=...")
    extras = getattr(ctx, "extras", None) or {}
    if params.criterion is not None:
        table = dict(params.criterion)
        name = table.pop("name", None)
        host = getattr(ctx, "host", None)
        if not isinstance(name, str) or host is None:
            raise ComponentError("S2SD criterion must be a loss table with a `name`, built inside a run",
                                 where="regularizers: s2sd criterion", fix='e.g. criterion = {name = "margin"}')
        info = host.registry.get("losses", name)
        spec_params = info.validate(table, where="regularizers.s2sd.criterion")

        def build_loss(target_ctx: Any) -> Any:
            return info.build(spec_params, target_ctx)
    elif extras.get("loss_spec") is not None:
        loss_spec = extras["loss_spec"]

        def build_loss(target_ctx: Any) -> Any:
            return loss_spec.build(target_ctx)
    else:
        loss = getattr(ctx, "loss", None)
        if loss is None or any(True for _ in getattr(loss, "parameters", lambda: iter(()))()):
            raise ComponentError(
                "S2SD cannot make target criteria: no recipe [loss] spec in the context, and the context loss "
                f"({type(loss).__name__}) is missing or has parameters sized for the base embedding",
                where="regularizers: s2sd", fix='give criterion = {name = "..."} or build S2SD inside a run')

        def build_loss(target_ctx: Any) -> Any:
            return copy.deepcopy(loss)

    def make_criterion(dim: int) -> Any:
        target_ctx = dataclasses.replace(ctx, embedding_size=dim) if dataclasses.is_dataclass(ctx) else ctx
        return build_loss(target_ctx)

    make_miner = None
    miner_spec = extras.get("miner_spec")
    if params.use_miner and miner_spec is not None:

        def make_miner() -> Any:
            return miner_spec.build(ctx)

    from dmlplug_builtins.regularizers.s2sd import S2SD

    return S2SD(
        int(feature_dim), params.target_dims, make_criterion, make_miner,
        temperature=params.temperature, distill_weight=params.distill_weight, target_weight=params.target_weight,
        feature_distill=params.feature_distill, feature_weight=params.feature_weight,
        feature_delay=params.feature_delay, pool_aggr=params.pool_aggr, lr_mult=params.lr_mult,
        weight_decay=params.weight_decay,
    ).to(getattr(ctx, "device", "cpu") or "cpu")


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
    register(
        "diva", build_diva, params=DivaParams,
        description="DiVA: shared, intra-class, MoCo (second view + EMA model while alpha_ssl > 0) and "
                    "decorrelation terms for a multi head.",
        requires=("named_embeddings",),
    )
    register(
        "s2sd", build_s2sd, params=S2sdParams,
        description="S2SD: auxiliary high-dimensional target heads trained with the recipe's loss, their batch "
                    "similarities distilled into the base embedding (train time only).",
        requires=("features",),
    )
