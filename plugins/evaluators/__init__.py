"""Built-in evaluators (retrieval, clustering, verification, OPIS, structure) and ``dmlplug evaluate``.

Every evaluator reads a shared :class:`dmlplug.evaluation.EvalContext`; the evaluator classes and the metric
maths live in the public ``dmlplug.evaluation`` package and are imported inside the factories so that loading
plugins stays light. The ``dmlplug evaluate`` command is in :mod:`.command`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from dmlplug import BuildContext, Params, hookimpl

Normalization = Literal["standard", "revisiting"]
#: Both normalisations (the default of the mAP evaluators).
_BOTH_NORMALIZATIONS: tuple[Normalization, ...] = ("standard", "revisiting")


def _positive_sorted(values: list[int]) -> list[int]:
    if not values or any(v < 1 for v in values):
        raise ValueError("give at least one k, every k ≥ 1")
    return sorted(set(values))


class OneMetric:
    """Mixed into the Params of an evaluator that reports one metric, named by ``METRIC``."""

    METRIC: ClassVar[str]

    def metric_names(self) -> tuple[str, ...]:
        """``(METRIC,)``: the one key the evaluator returns."""
        return (self.METRIC,)


class RecallParams(Params):
    """Parameters of ``recall``."""

    k: list[int] = Field(default_factory=lambda: [1, 2, 4, 8], description="Cut-offs k of recall@k.")
    average: Literal["queries", "classes"] = Field(
        "queries", description="Average over queries, or per class first (PML avg_of_avgs).")
    per_class: bool = Field(False, description="Write a per-class CSV to the run directory.")

    @field_validator("k")
    @classmethod
    def _check_k(cls, v: list[int]) -> list[int]:
        return _positive_sorted(v)

    def metric_names(self) -> tuple[str, ...]:
        """``recall@<k>`` for every k."""
        return tuple(f"recall@{k}" for k in self.k)

    def reads_neighbours(self) -> bool:
        """A retrieval metric: computed from the kNN list (re-ranked by ``[evaluation] rerank``)."""
        return True


class AveragedParams(Params):
    """Parameters of ``map_at_r`` and ``r_precision``."""

    average: Literal["queries", "classes"] = Field(
        "queries", description="Average over queries, or per class first (PML avg_of_avgs).")
    per_class: bool = Field(False, description="Write a per-class CSV to the run directory.")

    def reads_neighbours(self) -> bool:
        """A retrieval metric: computed from the kNN list (re-ranked by ``[evaluation] rerank``)."""
        return True


class MapAtRParams(OneMetric, AveragedParams):
    """Parameters of ``map_at_r``."""

    METRIC: ClassVar[str] = "map@r"


class RPrecisionParams(OneMetric, AveragedParams):
    """Parameters of ``r_precision``."""

    METRIC: ClassVar[str] = "r_precision"


def _normalised(base: str, normalizations: Sequence[str]) -> tuple[str, ...]:
    # The key of a mAP variant: standard -> base, revisiting -> base_revisiting (retrieval.spec_key).
    return tuple(base + ("" if n == "standard" else "_revisiting") for n in normalizations)


class MapAtKParams(AveragedParams):
    """Parameters of ``map_at_1000``."""

    k: int = Field(1000, ge=1, description="Cut-off of the ranking (metric key map@<k>).")
    normalizations: list[Normalization] = Field(
        default_factory=lambda: list(_BOTH_NORMALIZATIONS),
        description="'standard' divides by R (PML, key map@<k>); 'revisiting' by R+1 (key map@<k>_revisiting).")

    def metric_names(self) -> tuple[str, ...]:
        """``map@<k>`` and/or ``map@<k>_revisiting``."""
        return _normalised(f"map@{self.k}", self.normalizations)


class MapAtCParams(AveragedParams):
    """Parameters of ``map_at_c``."""

    normalizations: list[Normalization] = Field(
        default_factory=lambda: list(_BOTH_NORMALIZATIONS),
        description="'standard' divides by R (key map@c); 'revisiting' by R+1 (key map@c_revisiting).")

    def metric_names(self) -> tuple[str, ...]:
        """``map@c`` and/or ``map@c_revisiting``."""
        return _normalised("map@c", self.normalizations)


class RetrievalParams(RecallParams):
    """Parameters of ``retrieval`` (recall@k, map@r and r_precision together)."""

    def metric_names(self) -> tuple[str, ...]:
        """``recall@<k>`` for every k, ``map@r`` and ``r_precision``."""
        return (*super().metric_names(), "map@r", "r_precision")


class ClusteringParams(Params):
    """Parameters of ``nmi``, ``ami`` and ``f1``."""

    iterations: int = Field(20, ge=1, description="k-means iterations (K = number of classes evaluated).")
    average_method: Literal["arithmetic", "geometric", "min", "max"] = Field(
        "arithmetic", description="Normalisation of NMI/AMI (scikit-learn's average_method).")


class NmiParams(OneMetric, ClusteringParams):
    """Parameters of ``nmi``."""

    METRIC: ClassVar[str] = "nmi"


class AmiParams(OneMetric, ClusteringParams):
    """Parameters of ``ami``."""

    METRIC: ClassVar[str] = "ami"


class F1Params(OneMetric, ClusteringParams):
    """Parameters of ``f1``."""

    METRIC: ClassVar[str] = "f1"


class PairParams(Params):
    """Options of the pair set shared by ``verification``, ``opis`` and ``eps_opis``."""

    pairs: Literal["auto", "all", "sampled"] = Field(
        "auto", description="All pairs, or per class all positives + sampled negatives; auto picks by size.")
    max_all_pairs: int = Field(20_000_000, ge=1, description="Largest pair count for which auto uses all pairs.")
    negative_ratio: float = Field(10.0, gt=0, description="Sampled negatives per positive pair, per class.")
    max_positives_per_class: int = Field(100_000, ge=1, description="Positive pairs per class before sampling.")

    def pair_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`dmlplug.evaluation.pairs.get_pairs`."""
        return {"mode": self.pairs, "max_all_pairs": self.max_all_pairs, "negative_ratio": self.negative_ratio,
                "max_positives_per_class": self.max_positives_per_class}


class VerificationParams(PairParams):
    """Parameters of ``verification``."""

    fars: list[float] = Field(default_factory=lambda: [1e-3, 1e-2, 1e-1],
                              description="False-accept rates for tar@far=<FAR>.")
    roc_points: int = Field(2000, ge=2, description="Most points of the ROC curve written to roc.csv.")

    @field_validator("fars")
    @classmethod
    def _check_fars(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < f < 1 for f in v):
            raise ValueError("every FAR must lie in (0, 1)")
        return v

    def metric_names(self) -> tuple[str, ...]:
        """``tar@far=<FAR>`` for every FAR (formatted like ``1e-3`` → ``0.001``) and ``eer``."""
        return (*(f"tar@far={far:g}" for far in self.fars), "eer")


class OpisParams(OneMetric, PairParams):
    """Parameters of ``opis``."""

    far_range: tuple[float, float] = Field((1e-2, 1e-1), description="FAR range defining the calibration range.")
    distance_range: tuple[float, float] | None = Field(
        None, description="Fixed (d_min, d_max) distance range instead of the FAR-based one.")
    grid_size: int = Field(100, ge=2, description="Number of thresholds in the calibration range.")
    utility: Literal["roc", "pr"] = Field(
        "roc", description="roc: harmonic mean of specificity and sensitivity; pr: F1 (balanced pairs).")

    @field_validator("far_range", "distance_range")
    @classmethod
    def _check_range(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not v[0] < v[1]:
            raise ValueError("the range must be (low, high) with low < high")
        return v

    METRIC: ClassVar[str] = "opis"


class EpsOpisParams(OpisParams):
    """Parameters of ``eps_opis``."""

    epsilon: float = Field(0.1, gt=0, le=1, description="Share of best and of worst classes compared.")
    pooling: Literal["average", "pairs"] = Field(
        "average", description="Pool a group by averaging its per-class rates, or by pooling its pair counts.")

    METRIC: ClassVar[str] = "eps_opis"


class StructureParams(Params):
    """Parameters of ``structure``."""

    rho: list[int] = Field(default_factory=lambda: [1, 2], description="m of the rho@m spectral decay values.")
    uniformity_t: float = Field(2.0, gt=0, description="t of the uniformity kernel exp(-t·d²) (2 gives G2).")
    uniformity_log: bool = Field(False, description="Report the log of the mean kernel (Wang & Isola).")
    max_pairs: int = Field(20_000_000, ge=1, description="Pairs used for the uniformity before sampling.")

    @field_validator("rho")
    @classmethod
    def _check_rho(cls, v: list[int]) -> list[int]:
        return _positive_sorted(v)

    def metric_names(self) -> tuple[str, ...]:
        """``rho@<m>`` for every m, the density metrics and ``uniformity_g2``."""
        return (*(f"rho@{m}" for m in self.rho), "pi_intra", "pi_inter", "pi_ratio", "class_concentration_var",
                "uniformity_g2")


def _retrieval(specs: list[tuple[str, Any]], params: Any, name: str) -> Any:
    from dmlplug_builtins.evaluators.retrieval import RetrievalEvaluator

    return RetrievalEvaluator(specs, average=params.average, per_class=params.per_class, name=name)


def build_recall(params: RecallParams, ctx: BuildContext) -> Any:
    """Recall@k for every k."""
    return _retrieval([("recall", k) for k in params.k], params, "recall")


def build_map_at_r(params: MapAtRParams, ctx: BuildContext) -> Any:
    """MAP@R."""
    return _retrieval([("map_r", None)], params, "map_at_r")


def build_r_precision(params: RPrecisionParams, ctx: BuildContext) -> Any:
    """R-precision."""
    return _retrieval([("r_precision", None)], params, "r_precision")


def build_map_at_1000(params: MapAtKParams, ctx: BuildContext) -> Any:
    """mAP@k with standard and/or Revisiting normalisation."""
    return _retrieval([("map_k", (params.k, n)) for n in params.normalizations], params, "map_at_1000")


def build_map_at_c(params: MapAtCParams, ctx: BuildContext) -> Any:
    """mAP@C with standard and/or Revisiting normalisation."""
    return _retrieval([("map_c", n) for n in params.normalizations], params, "map_at_c")


def build_retrieval(params: RetrievalParams, ctx: BuildContext) -> Any:
    """Recall@k, MAP@R and R-precision from one kNN graph."""
    specs = [("recall", k) for k in params.k] + [("map_r", None), ("r_precision", None)]
    return _retrieval(specs, params, "retrieval")


def _clustering(metric: str, params: ClusteringParams) -> Any:
    from dmlplug_builtins.evaluators.clustering import ClusteringEvaluator

    evaluator = ClusteringEvaluator([metric], params.iterations, params.average_method)
    evaluator.name = metric
    return evaluator


def build_nmi(params: NmiParams, ctx: BuildContext) -> Any:
    """NMI of k-means clusters."""
    return _clustering("nmi", params)


def build_ami(params: AmiParams, ctx: BuildContext) -> Any:
    """AMI of k-means clusters."""
    return _clustering("ami", params)


def build_f1(params: F1Params, ctx: BuildContext) -> Any:
    """Pair-counting F1 of k-means clusters."""
    return _clustering("f1", params)


def build_verification(params: VerificationParams, ctx: BuildContext) -> Any:
    """TAR@FAR, EER and ROC."""
    from dmlplug_builtins.evaluators.verification import VerificationEvaluator

    evaluator = VerificationEvaluator(params.fars, params.pair_options(), params.roc_points)
    evaluator.name = "verification"
    return evaluator


def _opis(metric: str, params: OpisParams, epsilon: float = 0.1, pooling: str = "average") -> Any:
    from dmlplug_builtins.evaluators.opis import OpisEvaluator

    evaluator = OpisEvaluator([metric], params.pair_options(), params.grid_size, params.far_range,
                              params.distance_range, params.utility, epsilon, pooling)
    evaluator.name = metric
    return evaluator


def build_opis(params: OpisParams, ctx: BuildContext) -> Any:
    """OPIS threshold-consistency."""
    return _opis("opis", params)


def build_eps_opis(params: EpsOpisParams, ctx: BuildContext) -> Any:
    """ε-OPIS threshold-consistency."""
    return _opis("eps_opis", params, params.epsilon, params.pooling)


def build_structure(params: StructureParams, ctx: BuildContext) -> Any:
    """Structure metrics."""
    from dmlplug_builtins.evaluators.structure import StructureEvaluator

    evaluator = StructureEvaluator(params.rho, params.uniformity_t, params.uniformity_log, params.max_pairs)
    evaluator.name = "structure"
    return evaluator


@hookimpl
def register_evaluators(register: Any) -> None:
    """Register the built-in evaluators."""
    register("retrieval", build_retrieval, params=RetrievalParams,
             description="recall@k, map@r and r_precision from one exact kNN graph (the default).")
    register("recall", build_recall, params=RecallParams, description="Recall@k (keys recall@<k>).")
    register("map_at_r", build_map_at_r, params=MapAtRParams, description="MAP@R (key map@r).")
    register("r_precision", build_r_precision, params=RPrecisionParams, description="R-precision (key r_precision).")
    register("map_at_1000", build_map_at_1000, params=MapAtKParams,
             description="mAP@1000, standard (map@1000) and Revisiting (map@1000_revisiting) normalisation.")
    register("map_at_c", build_map_at_c, params=MapAtCParams,
             description="mAP@C, standard (map@c) and Revisiting (map@c_revisiting) normalisation.")
    register("nmi", build_nmi, params=NmiParams, description="NMI of k-means with K = number of classes.")
    register("ami", build_ami, params=AmiParams, description="AMI of k-means with K = number of classes.")
    register("f1", build_f1, params=F1Params, description="Pair-counting F1 of the k-means clustering.")
    register("verification", build_verification, params=VerificationParams,
             description="TAR at given FARs (tar@far=<F>), EER, ROC curve artifact.")
    register("opis", build_opis, params=OpisParams,
             description="OPIS: across-class variance of the threshold utility (lower is better).")
    register("eps_opis", build_eps_opis, params=EpsOpisParams,
             description="ε-OPIS: utility gap between the ε worst and best classes.")
    register("structure", build_structure, params=StructureParams,
             description="rho@m, pi_intra/inter/ratio, uniformity_g2, class_concentration_var.")


@hookimpl
def register_commands(app: Any) -> None:
    """Add ``dmlplug evaluate FILE.npz``."""
    from dmlplug_builtins.evaluators.commands import cmd_evaluate

    app.command("evaluate")(cmd_evaluate)
