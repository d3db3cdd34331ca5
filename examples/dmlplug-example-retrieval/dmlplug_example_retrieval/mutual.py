"""The ``example_mutual`` re-ranker (imported only by its factory)."""

from __future__ import annotations

from typing import Any

import numpy as np


class MutualFirst:
    """Within each query's shortlist, the candidates the query would be a near neighbour of come first.

    A candidate ``c`` is mutual when ``sim(q, c) >= sim(c, its n-th nearest other gallery item)``: the query is
    at least as close to ``c`` as ``c``'s own ``n``-th neighbour (a one-sided k-reciprocal test, Qin et al. 2011).
    Mutual candidates keep their order, then the others; the neighbours after the shortlist keep theirs.

    Args:
        n: The neighbour rank that makes a candidate mutual.
        shortlist: How many of the first neighbours are re-ordered.
    """

    def __init__(self, n: int, shortlist: int):
        self.n, self.shortlist = n, shortlist

    def rerank(self, problem: Any, k: int) -> np.ndarray:
        """``Q×k`` gallery rows (a :class:`dmlplug.protocols.RerankProblem`)."""
        width = max(k, self.shortlist)
        depth = None if problem.depth is None else np.maximum(problem.depth, min(self.shortlist, width))
        found = np.asarray(problem.search(problem.queries, width, depth))
        gallery = np.asarray(problem.gallery, dtype=np.float64)
        nth = np.asarray(problem.gallery_neighbours(self.n))[:, -1]
        # the similarity of each gallery item to its n-th neighbour (-inf without one: then any query is mutual)
        radius = np.where(nth >= 0, np.einsum("gd,gd->g", gallery, gallery[np.maximum(nth, 0)]), -np.inf)
        head = found[:, :min(self.shortlist, width)]
        valid = head >= 0
        sims = np.einsum("qd,qkd->qk", np.asarray(problem.queries, dtype=np.float64), gallery[np.maximum(head, 0)])
        mutual = valid & (sims >= radius[np.maximum(head, 0)])
        # a stable sort on (not mutual, missing): mutual first, the found ones before the -1 slots
        order = np.argsort(2 * ~valid + ~mutual, axis=1, kind="stable")
        found[:, :head.shape[1]] = np.take_along_axis(head, order, axis=1)
        return found[:, :k]
