"""An example dmlplug plugin that adds kinds the host once kept closed: a re-ranker, an index codec, a pruner.

It registers

* the re-ranker ``example_mutual``: candidates of each query's shortlist that the query is a near neighbour of
  come first (``[evaluation] rerank = ["example_mutual"]``, ``dmlplug search --rerank example_mutual:n=3``);
* the index codec ``example_sq4``: faiss's 4-bit scalar quantiser, ``d/2`` bytes a vector
  (``dmlplug index --codec example_sq4``; ``--budget`` may choose it);
* the tune pruner ``example_hyperband``: Optuna's Hyperband (Li et al. 2018) over trial-epochs
  (``[tune.pruner] name = "example_hyperband"`` in a space file, as ``hyperband.space.toml`` beside this package).

Importing this module imports neither numpy nor faiss nor Optuna: the factories import the implementations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.protocols import Register

if TYPE_CHECKING:
    from dmlplug_example_retrieval.mutual import MutualFirst
    from dmlplug_example_retrieval.sq4 import ScalarQuantizer4

RERANKER, CODEC, PRUNER = "example_mutual", "example_sq4", "example_hyperband"


class MutualParams(Params):
    """Parameters of ``example_mutual``."""

    n: int = Field(5, ge=1, description="A candidate is mutual when the query is as close to it as its n-th "
                   "nearest other gallery item.")
    shortlist: int = Field(20, ge=2, description="How many of the first neighbours are re-ordered.")


def build_mutual(params: MutualParams, ctx: BuildContext) -> MutualFirst:
    """The mutual-first re-ranker."""
    from dmlplug_example_retrieval.mutual import MutualFirst

    return MutualFirst(params.n, params.shortlist)


class Sq4Params(Params):
    """Parameters of ``example_sq4`` (it has none to tune: the quantiser is trained on the gallery)."""


def build_sq4(params: Sq4Params, ctx: BuildContext) -> ScalarQuantizer4:
    """The 4-bit scalar-quantiser codec."""
    from dmlplug_example_retrieval.sq4 import ScalarQuantizer4

    return ScalarQuantizer4()


class HyperbandParams(Params):
    """Parameters of ``example_hyperband`` (Optuna's ``HyperbandPruner``; resources are trial-epochs)."""

    min_resource: int = Field(1, ge=1, description="Trial-epochs every trial trains before it can be stopped.")
    max_resource: int | None = Field(None, ge=1, description="Trial-epochs of a whole trial (None: Optuna's 'auto', "
                                     "the most steps a finished trial reported).")
    reduction_factor: int = Field(3, ge=2, description="1/reduction_factor of the trials go on at every rung.")


def build_hyperband(params: HyperbandParams, ctx: BuildContext) -> Any:
    """Optuna's Hyperband pruner."""
    import optuna

    return optuna.pruners.HyperbandPruner(min_resource=params.min_resource,
                                          max_resource=params.max_resource or "auto",
                                          reduction_factor=params.reduction_factor)


@hookimpl
def register_rerankers(register: Register) -> None:
    """Register the mutual-first re-ranker."""
    register(RERANKER, build_mutual, params=MutualParams,
             description="Example plugin: shortlist candidates the query is a near neighbour of come first.")


@hookimpl
def register_index_codecs(register: Register) -> None:
    """Register the 4-bit scalar-quantiser codec."""
    register(CODEC, build_sq4, params=Sq4Params,
             description="Example plugin: faiss 4-bit scalar quantisation, d/2 bytes a vector.")


@hookimpl
def register_tune_pruners(register: Register) -> None:
    """Register Hyperband."""
    register(PRUNER, build_hyperband, params=HyperbandParams,
             description="Example plugin: Optuna's Hyperband pruner over trial-epochs.")
