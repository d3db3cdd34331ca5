"""Re-ranking methods: aqe, dba and krnn (docs/reranking.md), registered as ``rerankers``.

Each factory returns a :class:`dmlplug.protocols.Reranker`: ``rerank(problem, k)`` reads the unit queries and
gallery of a :class:`dmlplug.protocols.RerankProblem` and searches through it, so the same object re-ranks an
evaluation (exact kNN) and ``dmlplug search`` (the index's search). This module holds the Params, the factories
and the registration hook and stays light (no numpy or torch at import); the maths lives in :mod:`.expansion`
(αQE, DBA) and :mod:`.kreciprocal` (k-reciprocal), imported by the factories.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl


class ExpansionParams(Params):
    """Parameters of the re-rankers ``aqe`` and ``dba`` (Radenović et al.: n = 5 here, α = 3)."""

    n: int = Field(5, ge=1, description="Neighbours averaged into each vector.")
    alpha: float = Field(3.0, ge=0, allow_inf_nan=False,
                         description="Exponent α of the weights (q·g)^α (0: plain average expansion).")


class KReciprocalParams(Params):
    """Parameters of the re-ranker ``krnn`` (Zhong et al.'s k1 = 20, k2 = 6, λ = 0.3)."""

    k1: int = Field(20, ge=1, description="Size of the k-reciprocal neighbourhoods.")
    k2: int = Field(6, ge=1, description="Neighbours of the local query expansion (1: none).")
    # `lambda` is a Python keyword: the field is `lam`, read and written as `lambda`.
    lam: float = Field(0.3, ge=0, le=1, alias="lambda", allow_inf_nan=False,
                       description="Weight λ of the original distance in the final distance.")
    shortlist: int = Field(100, ge=2, description="Leading neighbours of each query that are re-ranked.")


def build_aqe(params: ExpansionParams, ctx: BuildContext) -> Any:
    """αQE: search again with each query expanded by its n nearest gallery items."""
    from dmlplug_builtins.rerank.expansion import QueryExpansion

    return QueryExpansion(n=params.n, alpha=params.alpha)


def build_dba(params: ExpansionParams, ctx: BuildContext) -> Any:
    """DBA: search a gallery whose items are expanded by their n nearest other items."""
    from dmlplug_builtins.rerank.expansion import DatabaseAugmentation

    return DatabaseAugmentation(n=params.n, alpha=params.alpha)


def build_krnn(params: KReciprocalParams, ctx: BuildContext) -> Any:
    """k-reciprocal re-ranking of each query's shortlist."""
    from dmlplug_builtins.rerank.kreciprocal import KReciprocal

    return KReciprocal(k1=params.k1, k2=params.k2, lam=params.lam, shortlist=params.shortlist)


@hookimpl
def register_rerankers(register: Any) -> None:
    """Register the built-in re-rankers."""
    register("aqe", build_aqe, params=ExpansionParams,
             description="α-weighted query expansion (Radenović et al. 2018).")
    register("dba", build_dba, params=ExpansionParams,
             description="Database-side augmentation: each gallery item averaged with its n nearest (Radenović et "
                         "al. 2018).")
    register("krnn", build_krnn, params=KReciprocalParams,
             description="k-reciprocal re-ranking of each query's shortlist (Zhong et al. 2017).")
