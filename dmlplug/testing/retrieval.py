"""Contract checks of re-rankers (and of index codecs, in :mod:`dmlplug.testing.codecs`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dmlplug.testing.fixtures import build, expect, load_host, make_context

if TYPE_CHECKING:
    from dmlplug.plugins import PluginHost


def check_reranker(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A re-ranker returns ``Q×k`` valid gallery rows, deterministically, on the problem an evaluation hands it.

    The problem is leave-one-out on 60 clustered unit vectors (each query is also gallery row ``i``): rows must be
    integers in ``[-1, G)``, no row twice in a query's list, never the query itself, ``-1`` only after the found
    ones; the same problem twice gives the same rows.
    """
    import numpy as np

    from dmlplug.evaluation.rerank_eval import ExactProblem
    from dmlplug.evaluation.rerank_problem import normalise

    host = host or load_host()
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 10)
    vectors = normalise(rng.normal(size=(60, 8)) + 3.0 * rng.normal(size=(6, 8))[labels])
    k = 7
    results = []
    for _ in range(2):
        problem = ExactProblem(vectors, vectors, np.arange(60, dtype=np.int64), np.full(60, k, dtype=np.int64),
                               64 << 20)
        reranker = build("rerankers", name, make_context(host), **(params or {}))
        results.append(np.asarray(reranker.rerank(problem, k)))
    rows = results[0]
    expect(rows.shape == (60, k) and rows.dtype.kind == "i",
           f"reranker {name!r}: expected a 60×{k} integer array, got {rows.dtype} {rows.shape}")
    expect(bool(((rows >= -1) & (rows < 60)).all()), f"reranker {name!r}: rows outside [-1, 60)")
    for q, row in enumerate(rows):
        found = row[row >= 0]
        expect(len(set(found.tolist())) == len(found), f"reranker {name!r}: query {q} lists a row twice: {row}")
        expect(q not in found, f"reranker {name!r}: query {q} is returned as its own neighbour")
        expect(bool((row[len(found):] == -1).all()), f"reranker {name!r}: -1 before a found row in query {q}: {row}")
    expect(np.array_equal(results[0], results[1]), f"reranker {name!r}: not deterministic")
