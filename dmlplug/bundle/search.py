"""Searching an index: what ``dmlplug search``, :meth:`Bundle.search` and a service share.

The functions here work on a loaded bundle and index and return plain data (plugins reach them through the public
:mod:`dmlplug.bundle.api`); the JSON shape of a search result is defined once, by :func:`match_record` and
:func:`search_vectors`::

    [{"query": "q.png", "matches": [{"id": 17, "path": "/data/gallery/a/1.png", "stored_path": "a/1.png",
                                     "similarity": 0.93, "accepted": true}, ...]}, ...]

``id`` is the item's label (stable: never reused after a removal), ``stored_path`` the path ``paths.json`` holds
(relative to the index's gallery root), ``path`` the file it names, absolute, openable from any working
directory (for an index of an older dmlplug, which records no root, the path as stored). ``accepted`` is
``similarity >= threshold`` in float64, ``None`` without a threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.gallery_paths import gallery_root, resolve

if TYPE_CHECKING:
    from dmlplug.bundle.bundle import Bundle
    from dmlplug.evaluation.rerank_spec import RerankSpec


def check_searchable(bundle: Bundle, index: Any) -> None:
    """Refuse an index of another model (:func:`~dmlplug.bundle.index_files.check_built_by`) or embedding size."""
    from dmlplug.bundle.index_files import check_built_by

    check_built_by(index, bundle)
    if index.dim != bundle.embedding_size:
        raise BundleError(f"the index holds {index.dim}-d embeddings, the bundle makes {bundle.embedding_size}-d",
                          fix="build the index with this bundle: dmlplug index BUNDLE IMAGES --out INDEX")


def search_vectors(index: Any, vectors: np.ndarray, names: Sequence[str], *, k: int = 10,
                   threshold: float | None = None, rerank: RerankSpec | None = None) -> list[dict[str, Any]]:
    """The ``k`` most similar items of ``index`` for each query vector, as ``search --json`` prints them.

    Args:
        index: A loaded index (checked against the bundle that embedded ``vectors``: :func:`check_searchable`).
        vectors: ``Q×D`` unit-length query embeddings.
        names: What each result's ``query`` says.
        k: Matches per query.
        threshold: Accept a match at ``similarity >= threshold`` (the bundle's :attr:`threshold` unless the
            caller has another); ``None``: no verdict.
        rerank: A re-ranker (:func:`~dmlplug.evaluation.rerank_spec.parse_rerank`); it reorders the matches,
            the similarities stay query·match cosines.

    Returns:
        One ``{"query", "matches"}`` per query (the shape of the module docstring), most similar first.

    Raises:
        BundleError: ``rerank`` needs float32 vectors the index does not keep.
    """
    if rerank is None:
        similarities, labels = index.search(vectors, k)
    else:
        from dmlplug.bundle.rerank_search import reranked_search

        similarities, labels = reranked_search(index, vectors, k, rerank)
    root = gallery_root(index)
    return [{"query": str(name),
             "matches": [match_record(index, int(label), float(s), threshold, root)
                         for s, label in zip(similarities[i], labels[i], strict=True) if label >= 0]}
            for i, name in enumerate(names)]


def match_record(index: Any, label: int, similarity: float, threshold: float | None,
                 root: str | None = None) -> dict[str, Any]:
    """One match: ``{"id", "path", "stored_path", "similarity", "accepted"}`` (see the module docstring).

    Args:
        index: The index (its ``paths``).
        label: The item's label.
        similarity: Its cosine similarity with the query.
        threshold: The acceptance threshold, or ``None``.
        root: The index's gallery root (:func:`~dmlplug.bundle.gallery_paths.gallery_root`).
    """
    stored = index.paths[label]
    # float(s) >= limit compares in float64: numpy would compare a float32 score with a Python float in float32,
    # rounding the threshold to the nearest float32, possibly below it.
    return {"id": label, "path": resolve(root, stored), "stored_path": stored, "similarity": float(similarity),
            "accepted": None if threshold is None else float(similarity) >= threshold}


def query_images(queries: Sequence[str | Path]) -> list[str]:
    """The query images of ``dmlplug search``: each file as given, each folder's images (recursive, sorted).

    Raises:
        BundleError: A folder holds no image (with the image suffixes ``dmlplug embed`` reads).
    """
    from dmlplug.bundle.images import list_images

    out: list[str] = []
    for query in queries:
        out.extend(list_images(query, what="query folder") if Path(query).is_dir() else [str(query)])
    return out


def format_results(results: list[dict[str, Any]], threshold: float | None) -> str:
    """The text output of ``dmlplug search``: the threshold, then per query one line per match."""
    note = "no calibrated threshold" if threshold is None else f"accept at similarity >= {threshold:.6f}"
    lines = [f"({note})"]
    for result in results:
        lines.append(f"query {result['query']}:")
        for rank, match in enumerate(result["matches"], 1):
            verdict = {True: "accept", False: "reject", None: "-"}[match["accepted"]]
            lines.append(f"  {rank:>3}  {match['similarity']:.4f}  {verdict:<6}  id {match['id']:<6}  "
                         f"{match['path']}")
    return "\n".join(lines)
