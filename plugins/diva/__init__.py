"""Built-in regularizer ``diva``: Diverse Visual Feature Aggregation (Milbich et al., ECCV 2020).

This module declares the parameters and registers the factory; the torch implementations are
:mod:`.regularizer` (the four auxiliary terms, their queue and parameter groups) and :mod:`.terms` (their
maths), imported when the factory runs, so loading the plugin stays torch-free. See docs/methods/diva.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.errors import ComponentError
from dmlplug.protocols import MultiHead

WHERE = "regularizers: diva"
#: The auxiliary heads, each decorrelated from the discriminative one by default.
_AUXILIARY: tuple[Literal["selfsimilarity", "shared", "intra"], ...] = ("selfsimilarity", "shared", "intra")


#: Optimizer groups of the margin β and of the decorrelation regressors (declared to validate, built by DiVA).
BETA_GROUP, REGRESSORS_GROUP = "diva_beta", "diva_regressors"


class DivaParams(Params):
    """Parameters of the DiVA regularizer (defaults: the CUB sample runs, docs/methods/diva.md)."""

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
        default_factory=lambda: list(_AUXILIARY),
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
        50.0, gt=0.0, description="lr multiplier of group diva_beta (50 = 5e-4 / 1e-5, docs/methods/diva.md).")
    regressor_lr_mult: float = Field(1.0, gt=0.0, description="lr multiplier of group diva_regressors (no wd).")

    def extra_requires(self) -> tuple[str, ...]:
        """The self-supervised term needs a second view and the EMA model (not needed with alpha_ssl = 0)."""
        return ("views:2", "ema") if self.alpha_ssl > 0 else ()

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """The margin β (:data:`BETA_GROUP`) and the decorrelation regressors (:data:`REGRESSORS_GROUP`)."""
        return (BETA_GROUP, REGRESSORS_GROUP)

    def head_embeddings(self) -> dict[str, str]:
        """The multi head's outputs DiVA uses, by parameter (``dmlplug validate`` checks them against ``heads``)."""
        return {"discriminative_head": self.discriminative_head, "shared_head": self.shared_head,
                "selfsimilarity_head": self.selfsimilarity_head, "intra_head": self.intra_head}

    @model_validator(mode="after")
    def _rho_per_head(self) -> DivaParams:
        # Checked here rather than when the regularizer is built, so `dmlplug validate` catches it.
        if len(self.rho) not in (1, len(self.decorrelate)):
            raise ValueError(f"rho has {len(self.rho)} values for {len(self.decorrelate)} decorrelated heads: "
                             "give one value, or one per entry of decorrelate")
        return self


def build_diva(params: DivaParams, ctx: BuildContext) -> Any:
    """Build the DiVA regularizer for the recipe's multi head.

    The shared and intra-class Margin losses are two instances of loss ``margin`` and the shared miner
    wraps miner ``distance_weighted`` (``anchors = "with_positive"``), all built through the run's registry.

    Raises:
        ComponentError: The head lacks one of the four named heads, or the number of classes is unknown
            (a ``rho`` of the wrong length is rejected by :class:`DivaParams` already).
    """
    roles = {"discriminative": params.discriminative_head, "shared": params.shared_head,
             "selfsimilarity": params.selfsimilarity_head, "intra": params.intra_head}
    head_fix = ("use [head] name = 'multi' with heads = {discriminative = 128, shared = 128, selfsimilarity = 128, "
                "intra = 128}, or point the *_head parameters at its head names")
    head = ctx.require("head")
    if not isinstance(head, MultiHead):
        raise ComponentError("DiVA needs a multi-head model, but the recipe's head has no named heads",
                             where=WHERE, fix=head_fix)
    sizes = head.output_sizes
    missing = [f"{role} ({name!r})" for role, name in roles.items() if name not in sizes]
    if missing:
        raise ComponentError(f"DiVA's head(s) {', '.join(missing)} are not heads of the model "
                             f"(it has {sorted(sizes)})", where=WHERE, fix=head_fix)
    ctx.require("num_classes")
    dims = {role: int(sizes[name]) for role, name in roles.items()}
    rho = params.rho * len(params.decorrelate) if len(params.rho) == 1 else params.rho
    # The reference trains one β vector per auxiliary space: two instances of the same Margin loss.
    margin = {"name": "margin", "margin": params.margin, "beta": params.beta, "learn_beta": params.learn_beta,
              "normalizer": params.margin_normalizer}
    shared_loss, intra_loss = (ctx.build("loss", margin, where=f"{WHERE} margin loss") for _ in range(2))
    distance_weighted = ctx.build(
        "miner", {"name": "distance_weighted", "lower_cutoff": params.lower_cutoff, "anchors": "with_positive"},
        where=f"{WHERE} shared miner")

    from dmlplug_builtins.diva.regularizer import DivaRegularizer
    from dmlplug_builtins.diva.terms import LabelPermutingMiner

    return DivaRegularizer(
        roles, dims,
        shared_loss=shared_loss, intra_loss=intra_loss, shared_miner=LabelPermutingMiner(distance_weighted),
        batch_size=ctx.batch_size,
        alpha_shared=params.alpha_shared, alpha_intra=params.alpha_intra, alpha_ssl=params.alpha_ssl,
        rho=dict(zip(params.decorrelate, rho, strict=True)),
        temperature=params.temperature, n_key_batches=params.n_key_batches, momentum=params.momentum,
        negative_normalization=params.negative_normalization, lower_cutoff=params.lower_cutoff,
        upper_cutoff=params.upper_cutoff, shuffle_keys=params.shuffle_keys, regressor_hidden=params.regressor_hidden,
        beta_lr_mult=params.beta_lr_mult, regressor_lr_mult=params.regressor_lr_mult,
    ).to(ctx.device)


@hookimpl
def register_regularizers(register: Any) -> None:
    """Register ``diva``."""
    register(
        "diva", build_diva, params=DivaParams,
        description="DiVA: shared, intra-class, MoCo (second view + EMA model while alpha_ssl > 0) and "
                    "decorrelation terms for a multi head.",
        requires=("named_embeddings",),
    )
