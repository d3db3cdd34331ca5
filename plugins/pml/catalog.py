"""The catalogue of pytorch-metric-learning classes exposed by name: what PML itself cannot tell (pure data, no torch).

PML's constructors tell the argument names and defaults; they are read from PML (:mod:`.signatures`, stored per
PML version so that validation stays torch-free) and never copied here. What a signature cannot tell is kept
here, once per exposed class: the recipe name and aliases, the description and capability tags, the type and
description of each argument a recipe may set (and a recipe default where PML has none or a different one),
the arguments filled from the build context, and the arguments deliberately left at PML's default (with why).

Every other argument of a class is derived from its signature: ``distance`` and ``reducer`` become nested
component tables (``Annotated[ComponentTable, TableOf("distances")]`` / ``TableOf("reducers")``, any registered distance
or reducer), ``embedding_regularizer`` / ``weight_regularizer`` nested PML-regulariser tables with their
``*_reg_weight``. ``tests/builtins/pml/test_pml_catalog.py`` checks that every argument of every catalogued class is a
recipe parameter, filled from the context, a nested table or kept here, so nothing is dropped silently when PML changes.
"""

from __future__ import annotations

from typing import Literal

from dmlplug_builtins.pml.catalog_types import KEPT_EVERYWHERE, PML, Arg, PmlClass

__all__ = ["DISTANCES", "KEPT_EVERYWHERE", "LOSSES", "MINERS", "NOT_COMPONENTS", "PML", "REDUCERS", "REGULARIZERS",
           "TABLES", "WRAPPERS", "Arg", "PmlClass", "by_name", "module_of"]

# Shared wording, so a parameter means the same thing wherever it appears.
_SCALE = "Scale s applied to the cosine logits."
_TEMPERATURE = "Softmax temperature (smaller = sharper)."
_ARCMARGIN = "Additive angular margin, in degrees."
_MULT_MARGIN = "Multiplicative angular margin m (an integer >= 1)."
_TRIPLETS_PER_ANCHOR = 'Triplets per anchor when no miner is used: "all" or an integer.'

_CLASSES = {"num_classes": "num_classes", "embedding_size": "embedding_size"}
# Classification-style losses weight each sample by how often it appears in the mined tuples:
# they consume tuples, but only as sample weights ("tuples_as_weights").
_PROXY_TAGS = ("proxies", "needs_num_classes", "has_parameters", "uses_tuples", "tuples_as_weights")

LOSSES: tuple[PmlClass, ...] = (
    PmlClass("AngularLoss", "angular", "Angular loss (Wang et al. 2017) on triplets.",
             (Arg("alpha", float, "Angle bound alpha, in degrees."),),
             aliases=("angular_loss",), tags=("uses_tuples",)),
    PmlClass("ArcFaceLoss", "arcface", "ArcFace: additive angular margin softmax over class weights.",
             (Arg("margin", float, _ARCMARGIN), Arg("scale", float, _SCALE)),
             aliases=("arc_face", "arc_face_loss"), from_ctx=_CLASSES, tags=_PROXY_TAGS),
    PmlClass("CircleLoss", "circle", "Circle loss (Sun et al. 2020) on pairs.",
             (Arg("m", float, "Relaxation margin m."), Arg("gamma", float, "Scale factor gamma.")),
             aliases=("circle_loss",), tags=("uses_tuples",)),
    PmlClass("ContrastiveLoss", "contrastive",
             "Contrastive loss: pull positives within, push negatives beyond a margin.",
             (Arg("pos_margin", float, "Positive pairs are penalised above this distance."),
              Arg("neg_margin", float, "Negative pairs are penalised below this distance.")),
             aliases=("contrastive_loss",), tags=("uses_tuples",)),
    PmlClass("CosFaceLoss", "cosface", "CosFace: additive cosine margin softmax over class weights.",
             (Arg("margin", float, "Additive cosine margin."), Arg("scale", float, _SCALE)),
             aliases=("cos_face", "cos_face_loss"), from_ctx=_CLASSES, tags=_PROXY_TAGS),
    PmlClass("DynamicSoftMarginLoss", "dynamic_soft_margin",
             "Dynamic soft margin loss with a CDF-based margin (Zhang & Rusinkiewicz 2019).",
             (Arg("min_val", float, "Smallest significant value of d_pos - d_neg."),
              Arg("num_bins", int, "Number of histogram bins over [min_val, inf)."),
              Arg("momentum", float, "Weight of the current batch in the running histogram.")),
             aliases=("dynamic_soft_margin_loss",), tags=("uses_tuples",)),
    PmlClass("FastAPLoss", "fast_ap", "FastAP: differentiable average precision via distance histograms.",
             (Arg("num_bins", int, "Number of distance histogram bins."),),
             aliases=("fast_ap_loss", "fastap"), tags=("uses_tuples",)),
    PmlClass("GeneralizedLiftedStructureLoss", "generalized_lifted_structure",
             "Generalised lifted-structure loss (Hermans et al. 2017).",
             (Arg("neg_margin", float, "Margin for negative pairs."),
              Arg("pos_margin", float, "Margin for positive pairs.")),
             aliases=("generalized_lifted_structure_loss",), tags=("uses_tuples",)),
    PmlClass("HistogramLoss", "histogram", "Histogram loss (Ustinova & Lempitsky 2016) on similarity histograms.",
             (Arg("n_bins", int | None, "Number of bins; give this or delta (default 100 bins)."),
              Arg("delta", float | None, "Bin width; must equal 2 / n_bins when both are given.")),
             aliases=("histogram_loss",), tags=("uses_tuples",)),
    PmlClass("InstanceLoss", "instance", "Instance loss (Zheng et al. 2020): softmax over the batch similarity rows.",
             (Arg("gamma", float, "Inverse temperature gamma."),),
             aliases=("instance_loss",)),
    PmlClass("IntraPairVarianceLoss", "intra_pair_variance",
             "Intra-pair variance loss (Yu et al. 2019): penalises spread of positive and negative similarities.",
             (Arg("pos_eps", float, "Tolerance epsilon for positive pairs."),
              Arg("neg_eps", float, "Tolerance epsilon for negative pairs.")),
             aliases=("intra_pair_variance_loss",), tags=("uses_tuples",)),
    PmlClass("LargeMarginSoftmaxLoss", "large_margin_softmax", "Large-margin softmax (L-Softmax, Liu et al. 2016).",
             (Arg("margin", int, _MULT_MARGIN), Arg("scale", float, _SCALE)),
             aliases=("large_margin_softmax_loss", "lsoftmax"), from_ctx=_CLASSES, tags=_PROXY_TAGS),
    PmlClass("LiftedStructureLoss", "lifted_structure", "Lifted-structure loss (Oh Song et al. 2016).",
             (Arg("neg_margin", float, "Margin for negative pairs."),
              Arg("pos_margin", float, "Margin for positive pairs.")),
             aliases=("lifted_structure_loss",), tags=("uses_tuples",)),
    PmlClass("ManifoldLoss", "manifold",
             "Manifold proxy loss (Aziere & Todorovic 2019); one proxy per training class, labels as meta-classes.",
             (Arg("lambdaC", float, "Weight of the context loss (0: intrinsic loss only)."),
              Arg("alpha", float, "Random-walk parameter in (0, 1)."),
              Arg("margin", float, "Margin of the proxy losses.")),
             aliases=("manifold_loss",), from_ctx={"l": "embedding_size", "K": "num_classes"},
             tags=("proxies", "needs_num_classes", "has_parameters"), adapter="LabelsAsMetaClasses"),
    PmlClass("MarginLoss", "pml_margin",
             "PML's MarginLoss (distance in place of sqrt(d^2+1e-8)); see `margin` for the Revisiting version.",
             (Arg("margin", float, "Triplet margin alpha."),
              Arg("nu", float, "Weight of the beta regulariser."),
              Arg("beta", float, "Initial class boundary beta."),
              Arg("triplets_per_anchor", int | Literal["all"], _TRIPLETS_PER_ANCHOR),
              Arg("learn_beta", bool, "Learn beta by gradient descent."),
              Arg("per_class_beta", bool,
                  "One beta per training class (passes num_classes from the context); else one shared beta.",
                  default=False, stands_for="num_classes")),
             aliases=("margin_loss",), tags=("uses_tuples",)),
    PmlClass("MultiSimilarityLoss", "multi_similarity", "Multi-similarity loss (Wang et al. 2019).",
             (Arg("alpha", float, "Weight of positive pairs."),
              Arg("beta", float, "Weight of negative pairs."),
              Arg("base", float, "Similarity offset lambda.")),
             aliases=("multi_similarity_loss", "multisimilarity"), tags=("uses_tuples",)),
    PmlClass("NCALoss", "nca", "Neighbourhood components analysis loss over the batch.",
             (Arg("softmax_scale", float, "Scale applied to the negative distances before the softmax."),),
             aliases=("nca_loss",), tags=("uses_tuples",)),
    PmlClass("NPairsLoss", "n_pairs", "N-pairs loss (Sohn 2016): one positive per anchor against all others.",
             aliases=("n_pairs_loss", "npairs"), tags=("uses_tuples",)),
    PmlClass("NTXentLoss", "ntxent", "NT-Xent / InfoNCE loss over positive pairs.",
             (Arg("temperature", float, _TEMPERATURE),),
             aliases=("ntxent_loss", "nt_xent", "nt_xent_loss", "infonce"), tags=("uses_tuples",)),
    PmlClass("NormalizedSoftmaxLoss", "normalized_softmax", "Normalised softmax (NormFace) over class weights.",
             (Arg("temperature", float, _TEMPERATURE),),
             aliases=("normalized_softmax_loss", "norm_softmax"), from_ctx=_CLASSES, tags=_PROXY_TAGS),
    PmlClass("P2SGradLoss", "p2s_grad", "P2SGrad (Zhang et al. 2019): MSE between cosine logits and one-hot targets.",
             aliases=("p2s_grad_loss", "p2_s_grad_loss", "p2sgrad"),
             from_ctx={"descriptors_dim": "embedding_size", "num_classes": "num_classes"},
             tags=("needs_num_classes", "has_parameters")),
    PmlClass("PNPLoss", "pnp", "Rethinking ranking-based loss PNP (Li et al. 2022).",
             (Arg("b", float, "Boundary b of the PNP-D variants."),
              Arg("alpha", float, "Exponent of the PNP-D_q variant."),
              Arg("anneal", float, "Temperature of the sigmoid ranking surrogate."),
              Arg("variant", Literal["Ds", "Dq", "Iu", "Ib", "O"], "PNP variant.")),
             aliases=("pnp_loss",)),
    PmlClass("ProxyAnchorLoss", "proxy_anchor", "Proxy-Anchor loss (Kim et al. 2020).",
             (Arg("margin", float, "Margin delta."), Arg("alpha", float, "Scale alpha.")),
             aliases=("proxy_anchor_loss",), from_ctx=_CLASSES, tags=_PROXY_TAGS),
    PmlClass("ProxyNCALoss", "proxy_nca", "Proxy-NCA loss (Movshovitz-Attias et al. 2017).",
             (Arg("softmax_scale", float, "Scale applied to the negative distances before the softmax."),),
             aliases=("proxy_nca_loss",), from_ctx=_CLASSES, tags=_PROXY_TAGS),
    PmlClass("RankedListLoss", "ranked_list", "Ranked list loss (Wang et al. 2019).",
             (Arg("margin", float, "Margin m between the positive and negative sets.", default=0.4),
              Arg("Tn", float, "Temperature of the negative-pair weighting.", default=1.0),
              Arg("imbalance", float, "Trade-off between the positive and negative sets, in [0, 1]."),
              Arg("alpha", float | None, "Negative boundary alpha (default 1 + margin / 2)."),
              Arg("Tp", float, "Temperature of the positive-pair weighting.")),
             aliases=("ranked_list_loss",)),
    PmlClass("SignalToNoiseRatioContrastiveLoss", "snr_contrastive",
             "Signal-to-noise-ratio contrastive loss (Yuan et al. 2019); SNR distance only.",
             (Arg("pos_margin", float, "Positive pairs are penalised above this SNR distance."),
              Arg("neg_margin", float, "Negative pairs are penalised below this SNR distance.")),
             aliases=("signal_to_noise_ratio_contrastive", "signal_to_noise_ratio_contrastive_loss"),
             tags=("uses_tuples",)),
    PmlClass("SmoothAPLoss", "smooth_ap",
             "Smooth-AP (Brown et al. 2020); needs the same number of samples per class in every batch.",
             (Arg("temperature", float, "Temperature of the sigmoid rank surrogate."),),
             aliases=("smooth_ap_loss",), tags=("uses_tuples", "needs_equal_class_counts"),
             requires=("sampler:equal_class_counts",)),
    PmlClass("SoftTripleLoss", "soft_triple", "SoftTriple loss (Qian et al. 2019): several centres per class.",
             (Arg("centers_per_class", int, "Number of centres per class."),
              Arg("la", float, "Scale lambda."),
              Arg("gamma", float, "Temperature gamma of the soft assignment to centres."),
              Arg("margin", float, "Margin delta.")),
             aliases=("soft_triple_loss", "softtriple"), from_ctx=_CLASSES,
             tags=(*_PROXY_TAGS, "sub_centers")),
    PmlClass("SphereFaceLoss", "sphereface", "SphereFace: multiplicative angular margin softmax.",
             (Arg("margin", int, _MULT_MARGIN), Arg("scale", float, _SCALE)),
             aliases=("sphere_face", "sphere_face_loss"), from_ctx=_CLASSES, tags=_PROXY_TAGS),
    PmlClass("SubCenterArcFaceLoss", "sub_center_arcface", "Sub-centre ArcFace (Deng et al. 2020).",
             (Arg("margin", float, _ARCMARGIN), Arg("scale", float, _SCALE),
              Arg("sub_centers", int, "Number of sub-centres per class.")),
             aliases=("sub_center_arc_face", "sub_center_arc_face_loss", "subcenter_arcface"),
             from_ctx=_CLASSES, tags=(*_PROXY_TAGS, "sub_centers")),
    PmlClass("SupConLoss", "supcon", "Supervised contrastive loss (Khosla et al. 2020).",
             (Arg("temperature", float, _TEMPERATURE),),
             aliases=("sup_con", "sup_con_loss"), tags=("uses_tuples",)),
    PmlClass("ThresholdConsistentMarginLoss", "threshold_consistent_margin",
             "PML's threshold-consistent margin loss (TCM, Zhang et al. 2024) as a stand-alone loss.",
             (Arg("lambda_plus", float, "Weight of the positive term."),
              Arg("lambda_minus", float, "Weight of the negative term."),
              Arg("margin_plus", float, "Positive margin m+ (cosine similarity)."),
              Arg("margin_minus", float, "Negative margin m- (cosine similarity).")),
             aliases=("threshold_consistent_margin_loss", "tcm_loss"), tags=("uses_tuples",)),
    PmlClass("TripletMarginLoss", "triplet_margin", "Triplet margin loss.",
             (Arg("margin", float, "Triplet margin."),
              Arg("swap", bool, "Use the positive-negative distance when it is smaller (distance swap)."),
              Arg("smooth_loss", bool, "Soft-plus instead of the hinge."),
              Arg("triplets_per_anchor", int | Literal["all"], _TRIPLETS_PER_ANCHOR)),
             aliases=("triplet_margin_loss", "triplet"), tags=("uses_tuples",)),
    PmlClass("TupletMarginLoss", "tuplet_margin", "Tuplet margin loss (Yu & Tao 2019).",
             (Arg("margin", float, "Angular margin, in degrees."), Arg("scale", float, _SCALE)),
             aliases=("tuplet_margin_loss",), tags=("uses_tuples",)),
    PmlClass("VICRegLoss", "vicreg",
             "VICReg (Bardes et al. 2022); two samples of one class play the two views.",
             (Arg("invariance_lambda", float, "Weight of the invariance term."),
              Arg("variance_mu", float, "Weight of the variance term."),
              Arg("covariance_v", float, "Weight of the covariance term."),
              Arg("eps", float, "Epsilon of the variance term.")),
             aliases=("vicreg_loss", "vic_reg", "vic_reg_loss"), adapter="ClassPairsAsViews",
             keep=dict.fromkeys(("distance", "reducer", "embedding_regularizer", "embedding_reg_weight"),
                                "VICReg compares two views with its own terms: no distance, reducer or regulariser")),
)

#: PML loss wrappers, built from nested loss/miner tables; their nested args are declared in the package's Params.
WRAPPERS: tuple[PmlClass, ...] = (
    PmlClass("CrossBatchMemory", "cross_batch_memory",
             "Cross-batch memory (Wang et al. 2020): a queue of past embeddings as extra references.",
             (Arg("memory_size", int, "Number of past embeddings kept in the queue."),),
             aliases=("xbm",), from_ctx={"embedding_size": "embedding_size"}, tags=("uses_tuples",)),
    PmlClass("MultipleLosses", "multiple_losses", "Weighted sum of several losses, each with an optional miner."),
    PmlClass("SelfSupervisedLoss", "self_supervised",
             "Self-supervised wrapper; two samples of one class play the two views.",
             (Arg("symmetric", bool, "Also use the second view as anchors."),),
             aliases=("self_supervised_loss",), adapter="ClassPairsAsViews"),
)

MINERS: tuple[PmlClass, ...] = (
    PmlClass("AngularMiner", "angular", "Triplets whose angle at the negative exceeds a threshold.",
             (Arg("angle", float, "Angle threshold, in degrees."),),
             aliases=("angular_miner",), tags=("triplets",)),
    PmlClass("BatchEasyHardMiner", "batch_easy_hard", "Per-anchor easiest/hardest positive and negative pairs.",
             (Arg("pos_strategy", Literal["easy", "semihard", "hard", "all"], "Positive selection."),
              Arg("neg_strategy", Literal["easy", "semihard", "hard", "all"], "Negative selection."),
              Arg("allowed_pos_range", tuple[float, float] | None, "Keep positives within [low, high]."),
              Arg("allowed_neg_range", tuple[float, float] | None, "Keep negatives within [low, high].")),
             aliases=("batch_easy_hard_miner",), tags=("pairs",)),
    PmlClass("BatchHardMiner", "batch_hard", "Hardest positive and hardest negative per anchor (Hermans et al.).",
             (Arg("allowed_pos_range", tuple[float, float] | None, "Keep positives within [low, high]."),
              Arg("allowed_neg_range", tuple[float, float] | None, "Keep negatives within [low, high].")),
             aliases=("batch_hard_miner",), tags=("triplets",),
             keep=dict.fromkeys(("pos_strategy", "neg_strategy"), "BatchHardMiner fixes both to hard")),
    PmlClass("DistanceWeightedMiner", "pml_distance_weighted",
             "PML's distance-weighted miner (upper cut-off active); see `distance_weighted` for Revisiting-DML's.",
             (Arg("cutoff", float, "Lower distance cut-off lambda."),
              Arg("nonzero_loss_cutoff", float, "Negatives farther than this are never sampled.")),
             aliases=("distance_weighted_miner",), tags=("triplets",)),
    PmlClass("EmbeddingsAlreadyPackagedAsTriplets", "packaged_triplets",
             "Batch already laid out as (anchor, positive, negative) triples; returns them as is.",
             aliases=("embeddings_already_packaged_as_triplets",), tags=("triplets", "packaged_triplets"),
             keep={"distance": "it returns the batch's triples as they are and never compares embeddings"}),
    PmlClass("HDCMiner", "hdc", "Hard-aware deeply cascaded mining: keeps the hardest fraction of pairs.",
             (Arg("filter_percentage", float, "Fraction of pairs kept."),),
             aliases=("hdc_miner",), tags=("pairs",)),
    PmlClass("MultiSimilarityMiner", "multi_similarity", "Multi-similarity pair mining (Wang et al. 2019).",
             (Arg("epsilon", float, "Similarity slack epsilon."),),
             aliases=("multi_similarity_miner",), tags=("pairs",)),
    PmlClass("PairMarginMiner", "pair_margin", "Positive pairs beyond and negative pairs within given margins.",
             (Arg("pos_margin", float, "Positives farther than this are mined."),
              Arg("neg_margin", float, "Negatives closer than this are mined.")),
             aliases=("pair_margin_miner",), tags=("pairs",)),
    PmlClass("TripletMarginMiner", "triplet_margin", "Triplets that violate a margin (all, hard, semihard or easy).",
             (Arg("margin", float, "Triplet margin."),
              Arg("type_of_triplets", Literal["all", "hard", "semihard", "easy"], "Which triplets to keep.")),
             aliases=("triplet_margin_miner",), tags=("triplets",)),
    PmlClass("UniformHistogramMiner", "uniform_histogram", "Pairs sampled uniformly across the distance histogram.",
             (Arg("num_bins", int, "Number of distance bins."),
              Arg("pos_per_bin", int, "Positive pairs per bin."),
              Arg("neg_per_bin", int, "Negative pairs per bin.")),
             aliases=("uniform_histogram_miner",), tags=("pairs",)),
)

_NORMALIZE = Arg("normalize_embeddings", bool, "L2-normalise embeddings before comparing them.")
_POWER = Arg("power", float, "Raise every distance / similarity to this power.")
_P = Arg("p", float, "Norm degree of the distance and of the normalisation.")
_NORM_ONLY = "the norm degree of the normalisation only; a similarity's embeddings are L2-normalised"

DISTANCES: tuple[PmlClass, ...] = (
    PmlClass("CosineSimilarity", "cosine_similarity", "Cosine similarity.", (_POWER,), aliases=("cosine",),
             keep={"normalize_embeddings": "CosineSimilarity always normalises (PML asserts it)",
                   "p": _NORM_ONLY}),
    PmlClass("DotProductSimilarity", "dot_product_similarity", "Dot-product similarity.", (_NORMALIZE, _POWER),
             aliases=("dot_product",), keep={"p": _NORM_ONLY}),
    PmlClass("LpDistance", "lp_distance", "Lp (Euclidean for p = 2) distance.", (_NORMALIZE, _P, _POWER),
             aliases=("lp", "euclidean")),
    PmlClass("SNRDistance", "snr_distance", "Signal-to-noise-ratio distance.", (_NORMALIZE, _POWER),
             aliases=("snr",), keep={"p": _NORM_ONLY}),
)

REDUCERS: tuple[PmlClass, ...] = (
    PmlClass("AvgNonZeroReducer", "avg_non_zero", "Mean over the strictly positive losses.",
             aliases=("avg_non_zero_reducer",),
             keep=dict.fromkeys(("low", "high"), "AvgNonZeroReducer fixes low = 0 (strictly positive losses)")),
    PmlClass("ClassWeightedReducer", "class_weighted", "Mean of losses weighted by the anchor's class weight.",
             (Arg("weights", list[float] | None, "One weight per training class (default: 1 for every class).",
                  default=None),),
             aliases=("class_weighted_reducer",)),
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
             (Arg("low", float | None, "Keep losses above this value (none: no lower bound).", default=0.0),
              Arg("high", float | None, "Keep losses below this value.")),
             aliases=("threshold_reducer",)),
)

#: A PML regulariser's own distance and reducer are left at PML's defaults (Lp distance, mean).
_REGULARIZER_KEEP = dict.fromkeys(("distance", "reducer"), "a PML regulariser's own; left at PML's default")

REGULARIZERS: tuple[PmlClass, ...] = (
    PmlClass("CenterInvariantRegularizer", "center_invariant",
             "Centre-invariant regulariser (Wu et al. 2017): equal squared norms of the class weights.",
             aliases=("center_invariant_regularizer",), tags=("weights",), keep=_REGULARIZER_KEEP),
    PmlClass("LpRegularizer", "lp", "Lp norm of each row (embedding or class weight), raised to a power.",
             (Arg("p", float, "Norm degree."), Arg("power", float, "Power applied to each norm.")),
             aliases=("lp_regularizer",), tags=("embeddings", "weights"), keep=_REGULARIZER_KEEP),
    PmlClass("RegularFaceRegularizer", "regular_face",
             "RegularFace (Zhao et al. 2019): penalises each class weight's nearest other class weight.",
             aliases=("regular_face_regularizer", "regularface"), tags=("weights",), keep=_REGULARIZER_KEEP),
    PmlClass("SparseCentersRegularizer", "sparse_centers",
             "SoftTriple's sparse-centres regulariser: pulls the centres of each class together.",
             (Arg("centers_per_class", int | None,
                  "Centres per class (default: the loss's centers_per_class / sub_centers).", default=None),),
             aliases=("sparse_centers_regularizer",), from_ctx={"num_classes": "num_classes"},
             tags=("sub_centers",), keep=_REGULARIZER_KEEP),
    PmlClass("ZeroMeanRegularizer", "zero_mean", "Zero-mean regulariser: each row's entries should sum to zero.",
             aliases=("zero_mean_regularizer",), tags=("embeddings", "weights"), keep=_REGULARIZER_KEEP),
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


#: The catalogue tables by PML sub-module (``pytorch_metric_learning.<module>``).
TABLES: dict[str, tuple[PmlClass, ...]] = {
    "losses": LOSSES + WRAPPERS, "miners": MINERS, "distances": DISTANCES, "reducers": REDUCERS,
    "regularizers": REGULARIZERS,
}


def module_of(spec: PmlClass) -> str:
    """The PML sub-module holding ``spec``'s class (``"losses"`` ...)."""
    return next(module for module, table in TABLES.items() if any(s is spec for s in table))
