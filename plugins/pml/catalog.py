"""The catalogue of pytorch-metric-learning classes exposed by name (pure data, no torch).

Constructor signatures cannot be inspected at plugin start-up without importing torch, so every exposed
PML class is described here once: its recipe name, aliases, the constructor arguments a recipe may set
(type, default, description) and the arguments filled from the build context.
``tests/builtins/pml/test_pml_catalog.py`` compares this table with :func:`inspect.signature` of the installed
PML, so a PML upgrade that adds, removes or re-defaults an argument fails a test instead of drifting silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: :attr:`Arg.pml_default` when the recipe default is PML's own default.
SAME: Any = object()
#: :attr:`Arg.pml_default` of an argument PML requires (no default) but recipes may omit.
REQUIRED: Any = object()
#: Recipe arguments that stand for a PML argument of another name: (class, recipe arg) -> PML arg.
RENAMED: dict[tuple[str, str], str] = {("MarginLoss", "per_class_beta"): "num_classes"}


@dataclass(frozen=True)
class Arg:
    """One constructor argument a recipe may set.

    Attributes:
        name: Argument name, identical in PML's constructor and in the recipe.
        type: Python type of the recipe value.
        default: Recipe default.
        description: One line for ``dmlplug list --params`` and the docs.
        pml_default: PML's own default when the recipe default differs on purpose (:data:`REQUIRED` when
            PML has none), otherwise :data:`SAME`.
    """

    name: str
    type: Any
    default: Any
    description: str
    pml_default: Any = SAME


@dataclass(frozen=True)
class PmlClass:
    """A PML class registered under a recipe name.

    Attributes:
        cls: Class name inside its PML sub-module (``losses``, ``miners`` ...).
        name: Registered recipe name.
        description: One line shown by ``dmlplug list``.
        args: Recipe-settable constructor arguments.
        aliases: Other recipe names (always includes the mechanical snake_case of the class name
            when it differs from ``name``).
        from_ctx: Constructor argument -> :class:`~dmlplug.context.BuildContext` field it is read from.
        nested: Base-class keyword arguments exposed as nested tables / values: any of ``"distance"``,
            ``"reducer"``, ``"embedding_regularizer"``, ``"weight_regularizer"``.
        tags: Capability tags (vocabulary: docs/plugin-api.md).
        requires: Capabilities needed from the rest of the recipe.
        adapter: Name of a class in :mod:`dmlplug_builtins.pml.adapters` that wraps the PML object to fit
            the ``loss(embeddings, labels, indices_tuple)`` convention, or ``""``.
    """

    cls: str
    name: str
    description: str
    args: tuple[Arg, ...] = ()
    aliases: tuple[str, ...] = ()
    from_ctx: dict[str, str] = field(default_factory=dict)
    nested: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    adapter: str = ""


# Shared wording, so a parameter means the same thing wherever it appears.
_SCALE = "Scale s applied to the cosine logits."
_TEMPERATURE = "Softmax temperature (smaller = sharper)."
_ARCMARGIN = "Additive angular margin, in degrees."
_MULT_MARGIN = "Multiplicative angular margin m (an integer >= 1)."
_TRIPLETS_PER_ANCHOR = 'Triplets per anchor when no miner is used: "all" or an integer.'

# Base-class keyword arguments of every BaseMetricLossFunction / weight-owning loss / miner.
_LOSS = ("distance", "reducer", "embedding_regularizer")
_WLOSS = (*_LOSS, "weight_regularizer")
_MINER = ("distance",)
_CLASSES = {"num_classes": "num_classes", "embedding_size": "embedding_size"}
# Classification-style losses weight each sample by how often it appears in the mined tuples:
# they consume tuples, but only as sample weights ("tuples_as_weights").
_PROXY_TAGS = ("proxies", "needs_num_classes", "has_parameters", "uses_tuples", "tuples_as_weights")

LOSSES: tuple[PmlClass, ...] = (
    PmlClass("AngularLoss", "angular", "Angular loss (Wang et al. 2017) on triplets.",
             (Arg("alpha", float, 40.0, "Angle bound alpha, in degrees."),),
             aliases=("angular_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("ArcFaceLoss", "arcface", "ArcFace: additive angular margin softmax over class weights.",
             (Arg("margin", float, 28.6, _ARCMARGIN), Arg("scale", float, 64.0, _SCALE)),
             aliases=("arc_face", "arc_face_loss"), from_ctx=_CLASSES, nested=_WLOSS, tags=_PROXY_TAGS),
    PmlClass("CircleLoss", "circle", "Circle loss (Sun et al. 2020) on pairs.",
             (Arg("m", float, 0.4, "Relaxation margin m."), Arg("gamma", float, 80.0, "Scale factor gamma.")),
             aliases=("circle_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("ContrastiveLoss", "contrastive",
             "Contrastive loss: pull positives within, push negatives beyond a margin.",
             (Arg("pos_margin", float, 0.0, "Positive pairs are penalised above this distance."),
              Arg("neg_margin", float, 1.0, "Negative pairs are penalised below this distance.")),
             aliases=("contrastive_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("CosFaceLoss", "cosface", "CosFace: additive cosine margin softmax over class weights.",
             (Arg("margin", float, 0.35, "Additive cosine margin."), Arg("scale", float, 64.0, _SCALE)),
             aliases=("cos_face", "cos_face_loss"), from_ctx=_CLASSES, nested=_WLOSS, tags=_PROXY_TAGS),
    PmlClass("DynamicSoftMarginLoss", "dynamic_soft_margin",
             "Dynamic soft margin loss with a CDF-based margin (Zhang & Rusinkiewicz 2019).",
             (Arg("min_val", float, -2.0, "Smallest significant value of d_pos - d_neg."),
              Arg("num_bins", int, 10, "Number of histogram bins over [min_val, inf)."),
              Arg("momentum", float, 0.01, "Weight of the current batch in the running histogram.")),
             aliases=("dynamic_soft_margin_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("FastAPLoss", "fast_ap", "FastAP: differentiable average precision via distance histograms.",
             (Arg("num_bins", int, 10, "Number of distance histogram bins."),),
             aliases=("fast_ap_loss", "fastap"), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("GeneralizedLiftedStructureLoss", "generalized_lifted_structure",
             "Generalised lifted-structure loss (Hermans et al. 2017).",
             (Arg("neg_margin", float, 1.0, "Margin for negative pairs."),
              Arg("pos_margin", float, 0.0, "Margin for positive pairs.")),
             aliases=("generalized_lifted_structure_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("HistogramLoss", "histogram", "Histogram loss (Ustinova & Lempitsky 2016) on similarity histograms.",
             (Arg("n_bins", int | None, None, "Number of bins; give this or delta (default 100 bins)."),
              Arg("delta", float | None, None, "Bin width; must equal 2 / n_bins when both are given.")),
             aliases=("histogram_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("InstanceLoss", "instance", "Instance loss (Zheng et al. 2020): softmax over the batch similarity rows.",
             (Arg("gamma", float, 64.0, "Inverse temperature gamma."),),
             aliases=("instance_loss",), nested=_LOSS),
    PmlClass("IntraPairVarianceLoss", "intra_pair_variance",
             "Intra-pair variance loss (Yu et al. 2019): penalises spread of positive and negative similarities.",
             (Arg("pos_eps", float, 0.01, "Tolerance epsilon for positive pairs."),
              Arg("neg_eps", float, 0.01, "Tolerance epsilon for negative pairs.")),
             aliases=("intra_pair_variance_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("LargeMarginSoftmaxLoss", "large_margin_softmax", "Large-margin softmax (L-Softmax, Liu et al. 2016).",
             (Arg("margin", int, 4, _MULT_MARGIN), Arg("scale", float, 1.0, _SCALE)),
             aliases=("large_margin_softmax_loss", "lsoftmax"), from_ctx=_CLASSES, nested=_WLOSS, tags=_PROXY_TAGS),
    PmlClass("LiftedStructureLoss", "lifted_structure", "Lifted-structure loss (Oh Song et al. 2016).",
             (Arg("neg_margin", float, 1.0, "Margin for negative pairs."),
              Arg("pos_margin", float, 0.0, "Margin for positive pairs.")),
             aliases=("lifted_structure_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("ManifoldLoss", "manifold",
             "Manifold proxy loss (Aziere & Todorovic 2019); one proxy per training class, labels as meta-classes.",
             (Arg("lambdaC", float, 1.0, "Weight of the context loss (0: intrinsic loss only)."),
              Arg("alpha", float, 0.8, "Random-walk parameter in (0, 1)."),
              Arg("margin", float, 5e-4, "Margin of the proxy losses.")),
             aliases=("manifold_loss",), from_ctx={"l": "embedding_size", "K": "num_classes"}, nested=_LOSS,
             tags=("proxies", "needs_num_classes", "has_parameters"), adapter="LabelsAsMetaClasses"),
    PmlClass("MarginLoss", "pml_margin",
             "PML's MarginLoss (distance in place of sqrt(d^2+1e-8)); see `margin` for the Revisiting version.",
             (Arg("margin", float, 0.2, "Triplet margin alpha."),
              Arg("nu", float, 0.0, "Weight of the beta regulariser."),
              Arg("beta", float, 1.2, "Initial class boundary beta."),
              Arg("triplets_per_anchor", int | Literal["all"], "all", _TRIPLETS_PER_ANCHOR),
              Arg("learn_beta", bool, False, "Learn beta by gradient descent."),
              Arg("per_class_beta", bool, False,
                  "One beta per training class (passes num_classes from the context); else one shared beta.",
                  pml_default=None)),
             aliases=("margin_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("MultiSimilarityLoss", "multi_similarity", "Multi-similarity loss (Wang et al. 2019).",
             (Arg("alpha", float, 2.0, "Weight of positive pairs."),
              Arg("beta", float, 50.0, "Weight of negative pairs."),
              Arg("base", float, 0.5, "Similarity offset lambda.")),
             aliases=("multi_similarity_loss", "multisimilarity"), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("NCALoss", "nca", "Neighbourhood components analysis loss over the batch.",
             (Arg("softmax_scale", float, 1.0, "Scale applied to the negative distances before the softmax."),),
             aliases=("nca_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("NPairsLoss", "n_pairs", "N-pairs loss (Sohn 2016): one positive per anchor against all others.",
             aliases=("n_pairs_loss", "npairs"), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("NTXentLoss", "ntxent", "NT-Xent / InfoNCE loss over positive pairs.",
             (Arg("temperature", float, 0.07, _TEMPERATURE),),
             aliases=("ntxent_loss", "nt_xent", "nt_xent_loss", "infonce"), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("NormalizedSoftmaxLoss", "normalized_softmax", "Normalised softmax (NormFace) over class weights.",
             (Arg("temperature", float, 0.05, _TEMPERATURE),),
             aliases=("normalized_softmax_loss", "norm_softmax"), from_ctx=_CLASSES, nested=_WLOSS, tags=_PROXY_TAGS),
    PmlClass("P2SGradLoss", "p2s_grad", "P2SGrad (Zhang et al. 2019): MSE between cosine logits and one-hot targets.",
             aliases=("p2s_grad_loss", "p2_s_grad_loss", "p2sgrad"),
             from_ctx={"descriptors_dim": "embedding_size", "num_classes": "num_classes"}, nested=_LOSS,
             tags=("needs_num_classes", "has_parameters")),
    PmlClass("PNPLoss", "pnp", "Rethinking ranking-based loss PNP (Li et al. 2022).",
             (Arg("b", float, 2.0, "Boundary b of the PNP-D variants."),
              Arg("alpha", float, 1.0, "Exponent of the PNP-D_q variant."),
              Arg("anneal", float, 0.01, "Temperature of the sigmoid ranking surrogate."),
              Arg("variant", Literal["Ds", "Dq", "Iu", "Ib", "O"], "O", "PNP variant.")),
             aliases=("pnp_loss",), nested=_LOSS),
    PmlClass("ProxyAnchorLoss", "proxy_anchor", "Proxy-Anchor loss (Kim et al. 2020).",
             (Arg("margin", float, 0.1, "Margin delta."), Arg("alpha", float, 32.0, "Scale alpha.")),
             aliases=("proxy_anchor_loss",), from_ctx=_CLASSES, nested=_WLOSS, tags=_PROXY_TAGS),
    PmlClass("ProxyNCALoss", "proxy_nca", "Proxy-NCA loss (Movshovitz-Attias et al. 2017).",
             (Arg("softmax_scale", float, 1.0, "Scale applied to the negative distances before the softmax."),),
             aliases=("proxy_nca_loss",), from_ctx=_CLASSES, nested=_WLOSS, tags=_PROXY_TAGS),
    PmlClass("RankedListLoss", "ranked_list", "Ranked list loss (Wang et al. 2019).",
             (Arg("margin", float, 0.4, "Margin m between the positive and negative sets.", pml_default=REQUIRED),
              Arg("Tn", float, 1.0, "Temperature of the negative-pair weighting.", pml_default=REQUIRED),
              Arg("imbalance", float, 0.5, "Trade-off between the positive and negative sets, in [0, 1]."),
              Arg("alpha", float | None, None, "Negative boundary alpha (default 1 + margin / 2)."),
              Arg("Tp", float, 0.0, "Temperature of the positive-pair weighting.")),
             aliases=("ranked_list_loss",), nested=_LOSS),
    PmlClass("SignalToNoiseRatioContrastiveLoss", "snr_contrastive",
             "Signal-to-noise-ratio contrastive loss (Yuan et al. 2019); SNR distance only.",
             (Arg("pos_margin", float, 0.0, "Positive pairs are penalised above this SNR distance."),
              Arg("neg_margin", float, 1.0, "Negative pairs are penalised below this SNR distance.")),
             aliases=("signal_to_noise_ratio_contrastive", "signal_to_noise_ratio_contrastive_loss"),
             nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("SmoothAPLoss", "smooth_ap",
             "Smooth-AP (Brown et al. 2020); needs the same number of samples per class in every batch.",
             (Arg("temperature", float, 0.01, "Temperature of the sigmoid rank surrogate."),),
             aliases=("smooth_ap_loss",), nested=_LOSS, tags=("uses_tuples", "needs_equal_class_counts"),
             requires=("sampler:equal_class_counts",)),
    PmlClass("SoftTripleLoss", "soft_triple", "SoftTriple loss (Qian et al. 2019): several centres per class.",
             (Arg("centers_per_class", int, 10, "Number of centres per class."),
              Arg("la", float, 20.0, "Scale lambda."),
              Arg("gamma", float, 0.1, "Temperature gamma of the soft assignment to centres."),
              Arg("margin", float, 0.01, "Margin delta.")),
             aliases=("soft_triple_loss", "softtriple"), from_ctx=_CLASSES, nested=_WLOSS,
             tags=(*_PROXY_TAGS, "sub_centers")),
    PmlClass("SphereFaceLoss", "sphereface", "SphereFace: multiplicative angular margin softmax.",
             (Arg("margin", int, 4, _MULT_MARGIN), Arg("scale", float, 1.0, _SCALE)),
             aliases=("sphere_face", "sphere_face_loss"), from_ctx=_CLASSES, nested=_WLOSS, tags=_PROXY_TAGS),
    PmlClass("SubCenterArcFaceLoss", "sub_center_arcface", "Sub-centre ArcFace (Deng et al. 2020).",
             (Arg("margin", float, 28.6, _ARCMARGIN), Arg("scale", float, 64.0, _SCALE),
              Arg("sub_centers", int, 3, "Number of sub-centres per class.")),
             aliases=("sub_center_arc_face", "sub_center_arc_face_loss", "subcenter_arcface"),
             from_ctx=_CLASSES, nested=_WLOSS, tags=(*_PROXY_TAGS, "sub_centers")),
    PmlClass("SupConLoss", "supcon", "Supervised contrastive loss (Khosla et al. 2020).",
             (Arg("temperature", float, 0.1, _TEMPERATURE),),
             aliases=("sup_con", "sup_con_loss"), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("ThresholdConsistentMarginLoss", "threshold_consistent_margin",
             "PML's threshold-consistent margin loss (TCM, Zhang et al. 2024) as a stand-alone loss.",
             (Arg("lambda_plus", float, 1.0, "Weight of the positive term."),
              Arg("lambda_minus", float, 1.0, "Weight of the negative term."),
              Arg("margin_plus", float, 0.9, "Positive margin m+ (cosine similarity)."),
              Arg("margin_minus", float, 0.5, "Negative margin m- (cosine similarity).")),
             aliases=("threshold_consistent_margin_loss", "tcm_loss"), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("TripletMarginLoss", "triplet_margin", "Triplet margin loss.",
             (Arg("margin", float, 0.05, "Triplet margin."),
              Arg("swap", bool, False, "Use the positive-negative distance when it is smaller (distance swap)."),
              Arg("smooth_loss", bool, False, "Soft-plus instead of the hinge."),
              Arg("triplets_per_anchor", int | Literal["all"], "all", _TRIPLETS_PER_ANCHOR)),
             aliases=("triplet_margin_loss", "triplet"), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("TupletMarginLoss", "tuplet_margin", "Tuplet margin loss (Yu & Tao 2019).",
             (Arg("margin", float, 5.73, "Angular margin, in degrees."), Arg("scale", float, 64.0, _SCALE)),
             aliases=("tuplet_margin_loss",), nested=_LOSS, tags=("uses_tuples",)),
    PmlClass("VICRegLoss", "vicreg",
             "VICReg (Bardes et al. 2022); two samples of one class play the two views.",
             (Arg("invariance_lambda", float, 25.0, "Weight of the invariance term."),
              Arg("variance_mu", float, 25.0, "Weight of the variance term."),
              Arg("covariance_v", float, 1.0, "Weight of the covariance term."),
              Arg("eps", float, 1e-4, "Epsilon of the variance term.")),
             aliases=("vicreg_loss", "vic_reg", "vic_reg_loss"), adapter="ClassPairsAsViews"),
)

#: PML loss wrappers, built from nested loss/miner tables; their nested args are declared in the package's Params.
WRAPPERS: tuple[PmlClass, ...] = (
    PmlClass("CrossBatchMemory", "cross_batch_memory",
             "Cross-batch memory (Wang et al. 2020): a queue of past embeddings as extra references.",
             (Arg("memory_size", int, 1024, "Number of past embeddings kept in the queue."),),
             aliases=("xbm",), from_ctx={"embedding_size": "embedding_size"}, tags=("uses_tuples",)),
    PmlClass("MultipleLosses", "multiple_losses", "Weighted sum of several losses, each with an optional miner."),
    PmlClass("SelfSupervisedLoss", "self_supervised",
             "Self-supervised wrapper; two samples of one class play the two views.",
             (Arg("symmetric", bool, True, "Also use the second view as anchors."),),
             aliases=("self_supervised_loss",), adapter="ClassPairsAsViews"),
)

MINERS: tuple[PmlClass, ...] = (
    PmlClass("AngularMiner", "angular", "Triplets whose angle at the negative exceeds a threshold.",
             (Arg("angle", float, 20.0, "Angle threshold, in degrees."),),
             aliases=("angular_miner",), nested=_MINER, tags=("triplets",)),
    PmlClass("BatchEasyHardMiner", "batch_easy_hard", "Per-anchor easiest/hardest positive and negative pairs.",
             (Arg("pos_strategy", Literal["easy", "semihard", "hard", "all"], "easy", "Positive selection."),
              Arg("neg_strategy", Literal["easy", "semihard", "hard", "all"], "semihard", "Negative selection."),
              Arg("allowed_pos_range", tuple[float, float] | None, None, "Keep positives within [low, high]."),
              Arg("allowed_neg_range", tuple[float, float] | None, None, "Keep negatives within [low, high].")),
             aliases=("batch_easy_hard_miner",), nested=_MINER, tags=("pairs",)),
    PmlClass("BatchHardMiner", "batch_hard", "Hardest positive and hardest negative per anchor (Hermans et al.).",
             (Arg("allowed_pos_range", tuple[float, float] | None, None, "Keep positives within [low, high]."),
              Arg("allowed_neg_range", tuple[float, float] | None, None, "Keep negatives within [low, high].")),
             aliases=("batch_hard_miner",), nested=_MINER, tags=("triplets",)),
    PmlClass("DistanceWeightedMiner", "pml_distance_weighted",
             "PML's distance-weighted miner (upper cut-off active); see `distance_weighted` for Revisiting-DML's.",
             (Arg("cutoff", float, 0.5, "Lower distance cut-off lambda."),
              Arg("nonzero_loss_cutoff", float, 1.4, "Negatives farther than this are never sampled.")),
             aliases=("distance_weighted_miner",), nested=_MINER, tags=("triplets",)),
    PmlClass("EmbeddingsAlreadyPackagedAsTriplets", "packaged_triplets",
             "Batch already laid out as (anchor, positive, negative) triples; returns them as is.",
             aliases=("embeddings_already_packaged_as_triplets",), tags=("triplets", "packaged_triplets")),
    PmlClass("HDCMiner", "hdc", "Hard-aware deeply cascaded mining: keeps the hardest fraction of pairs.",
             (Arg("filter_percentage", float, 0.5, "Fraction of pairs kept."),),
             aliases=("hdc_miner",), nested=_MINER, tags=("pairs",)),
    PmlClass("MultiSimilarityMiner", "multi_similarity", "Multi-similarity pair mining (Wang et al. 2019).",
             (Arg("epsilon", float, 0.1, "Similarity slack epsilon."),),
             aliases=("multi_similarity_miner",), nested=_MINER, tags=("pairs",)),
    PmlClass("PairMarginMiner", "pair_margin", "Positive pairs beyond and negative pairs within given margins.",
             (Arg("pos_margin", float, 0.2, "Positives farther than this are mined."),
              Arg("neg_margin", float, 0.8, "Negatives closer than this are mined.")),
             aliases=("pair_margin_miner",), nested=_MINER, tags=("pairs",)),
    PmlClass("TripletMarginMiner", "triplet_margin", "Triplets that violate a margin (all, hard, semihard or easy).",
             (Arg("margin", float, 0.2, "Triplet margin."),
              Arg("type_of_triplets", Literal["all", "hard", "semihard", "easy"], "all", "Which triplets to keep.")),
             aliases=("triplet_margin_miner",), nested=_MINER, tags=("triplets",)),
    PmlClass("UniformHistogramMiner", "uniform_histogram", "Pairs sampled uniformly across the distance histogram.",
             (Arg("num_bins", int, 100, "Number of distance bins."),
              Arg("pos_per_bin", int, 10, "Positive pairs per bin."),
              Arg("neg_per_bin", int, 10, "Negative pairs per bin.")),
             aliases=("uniform_histogram_miner",), nested=_MINER, tags=("pairs",)),
)

_NORMALIZE = Arg("normalize_embeddings", bool, True, "L2-normalise embeddings before comparing them.")
_POWER = Arg("power", float, 1.0, "Raise every distance / similarity to this power.")
_P = Arg("p", float, 2.0, "Norm degree of the distance and of the normalisation.")

DISTANCES: tuple[PmlClass, ...] = (
    # CosineSimilarity always normalises (PML fixes normalize_embeddings=True), so it is not a parameter.
    PmlClass("CosineSimilarity", "cosine_similarity", "Cosine similarity.", (_POWER,), aliases=("cosine",)),
    PmlClass("DotProductSimilarity", "dot_product_similarity", "Dot-product similarity.", (_NORMALIZE, _POWER),
             aliases=("dot_product",)),
    PmlClass("LpDistance", "lp_distance", "Lp (Euclidean for p = 2) distance.", (_NORMALIZE, _P, _POWER),
             aliases=("lp", "euclidean")),
    PmlClass("SNRDistance", "snr_distance", "Signal-to-noise-ratio distance.", (_NORMALIZE, _POWER),
             aliases=("snr",)),
)

REDUCERS: tuple[PmlClass, ...] = (
    PmlClass("AvgNonZeroReducer", "avg_non_zero", "Mean over the strictly positive losses.",
             aliases=("avg_non_zero_reducer",)),
    PmlClass("ClassWeightedReducer", "class_weighted", "Mean of losses weighted by the anchor's class weight.",
             (Arg("weights", list[float] | None, None,
                  "One weight per training class (default: 1 for every class).", pml_default=REQUIRED),),
             aliases=("class_weighted_reducer",), from_ctx={"num_classes": "num_classes"}),
    PmlClass("DivisorReducer", "divisor", "Sum divided by a divisor the loss computes.",
             aliases=("divisor_reducer",)),
    PmlClass("DoNothingReducer", "do_nothing", "Returns the unreduced loss dictionary (for custom reductions).",
             aliases=("do_nothing_reducer",)),
    PmlClass("MeanReducer", "mean", "Mean of all losses.", aliases=("mean_reducer",)),
    PmlClass("MultipleReducers", "multiple", "One reducer per sub-loss name.", aliases=("multiple_reducers",)),
    PmlClass("PerAnchorReducer", "per_anchor", "Reduces per anchor first (mean), then with an inner reducer.",
             aliases=("per_anchor_reducer",)),
    PmlClass("SumReducer", "sum", "Sum of all losses.", aliases=("sum_reducer",)),
    PmlClass("ThresholdReducer", "threshold", "Mean of the losses inside [low, high].",
             (Arg("low", float | None, 0.0, "Keep losses above this value (none: no lower bound).", pml_default=None),
              Arg("high", float | None, None, "Keep losses below this value.")),
             aliases=("threshold_reducer",)),
)

REGULARIZERS: tuple[PmlClass, ...] = (
    PmlClass("CenterInvariantRegularizer", "center_invariant",
             "Centre-invariant regulariser (Wu et al. 2017): equal squared norms of the class weights.",
             aliases=("center_invariant_regularizer",), tags=("weights",)),
    PmlClass("LpRegularizer", "lp", "Lp norm of each row (embedding or class weight), raised to a power.",
             (Arg("p", float, 2.0, "Norm degree."), Arg("power", float, 1.0, "Power applied to each norm.")),
             aliases=("lp_regularizer",), tags=("embeddings", "weights")),
    PmlClass("RegularFaceRegularizer", "regular_face",
             "RegularFace (Zhao et al. 2019): penalises each class weight's nearest other class weight.",
             aliases=("regular_face_regularizer", "regularface"), tags=("weights",)),
    PmlClass("SparseCentersRegularizer", "sparse_centers",
             "SoftTriple's sparse-centres regulariser: pulls the centres of each class together.",
             (Arg("centers_per_class", int | None, None,
                  "Centres per class (default: the loss's centers_per_class / sub_centers).", pml_default=REQUIRED),),
             aliases=("sparse_centers_regularizer",), from_ctx={"num_classes": "num_classes"},
             tags=("sub_centers",)),
    PmlClass("ZeroMeanRegularizer", "zero_mean", "Zero-mean regulariser: each row's entries should sum to zero.",
             aliases=("zero_mean_regularizer",), tags=("embeddings", "weights")),
)

#: Exported PML names that are abstract bases, mixins or memory helpers, never components by themselves.
NOT_COMPONENTS: frozenset[str] = frozenset({
    "BaseLossWrapper", "BaseMetricLossFunction", "EmbeddingRegularizerMixin", "GenericPairLoss",
    "WeightRegularizerMixin", "BaseMiner", "BaseRegularizer", "BaseDistance", "BaseReducer",
    # BatchedDistance only splits a distance computation into chunks to save memory: no recipe role.
    "BatchedDistance",
})


def by_name(table: tuple[PmlClass, ...]) -> dict[str, PmlClass]:
    """Index a catalogue table by recipe name and alias."""
    index: dict[str, PmlClass] = {}
    for spec in table:
        for key in (spec.name, *spec.aliases):
            index[key] = spec
    return index
