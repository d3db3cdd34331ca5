"""``dmlplug search --rerank``: αQE, DBA or k-reciprocal re-ranking of an index's results.

The methods (docs/reranking.md, :mod:`dmlplug.evaluation.reranking`) need the gallery's float32 vectors: the
neighbours' vectors for αQE, the whole gallery for DBA, the candidates' pairwise distances for k-reciprocal.
An exact float32 index holds them; IVF-flat and HNSW-flat indexes store them uncompressed too and give them
back through faiss. An index of compressed codes does not, and is refused with a message naming the indexes
that re-rank.

Re-ranking changes which items come first; the similarity reported with each match (and the accept/reject
verdict at the calibrated threshold) stays the cosine similarity of the query and that item.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError
from dmlplug.evaluation.rerank_spec import RerankSpec

#: Codecs whose index keeps every item's float32 vector (``binary`` keeps them for its exact rescoring).
FLOAT_CODECS = ("float32", "ivf", "hnsw", "binary")
#: The indexes that keep float32 vectors, for messages.
RERANKABLE = "--codec float32 (the default), ivf, hnsw or binary"


def gallery_vectors(index: Any, spec: RerankSpec) -> np.ndarray:
    """The float32 vectors of ``index`` by label (``L×D``; rows of removed items are zero and never returned).

    Raises:
        BundleError: The index keeps no float32 vectors (a compressed codec).
    """
    codec = getattr(index, "codec", "float32")
    vectors = getattr(index, "embeddings", None)
    if codec == "float32" and isinstance(vectors, np.ndarray):
        return np.ascontiguousarray(vectors, dtype=np.float32)
    if codec in FLOAT_CODECS and getattr(index, "index", None) is not None:
        import faiss

        source = index.index.vectors if codec == "binary" else index.index
        if codec == "ivf":
            # Labels may have gaps after index-remove: a hash table maps any label to its list entry (memory only).
            faiss.extract_index_ivf(source).set_direct_map_type(faiss.DirectMap.Hashtable)  # type: ignore[attr-defined]
        live = np.array([label for label, path in enumerate(index.paths) if path is not None], dtype=np.int64)
        gallery = np.zeros((len(index.paths), int(index.dim)), dtype=np.float32)
        if len(live):
            gallery[live] = source.reconstruct_batch(live)
        return gallery
    where = str(getattr(index, "folder", None) or "the index")
    raise BundleError(
        f"--rerank {spec.name} needs the gallery's float32 vectors, and this index (codec {codec}) keeps only "
        "compressed codes", where=where,
        fix=f"search without --rerank, or rebuild the index as one that re-ranks: {RERANKABLE}")


def reranked_search(index: Any, queries: np.ndarray, k: int, spec: RerankSpec,
                    budget_bytes: int = 256 << 20) -> tuple[np.ndarray, np.ndarray]:
    """``(similarities Q×k, rows Q×k)`` of ``index`` after re-ranking with ``spec``; ``-1`` rows mark no match.

    αQE and k-reciprocal start from the index's own search (approximate for an IVF/HNSW index); DBA searches
    the augmented gallery exactly. Similarities are the cosine of the query and each returned item.

    Raises:
        BundleError: The index keeps no float32 vectors.
    """
    from dmlplug.evaluation.knn import exact_knn, resolve_backend
    from dmlplug.evaluation.reranking import augment_gallery, expand_queries, k_reciprocal, normalise

    gallery = gallery_vectors(index, spec)
    q = normalise(queries)
    k = min(k, len(gallery))
    p = spec.params
    if spec.name == "aqe":
        _, neighbours = index.search(q, int(p["n"]))
        _, rows = index.search(expand_queries(q, gallery, neighbours, alpha=float(p["alpha"]),
                                              budget_bytes=budget_bytes), k)
    elif spec.name == "dba":
        backend = resolve_backend("auto", False)
        # Only the items the index holds take part (labels of removed items are gaps in the vectors).
        live = np.array([label for label, path in enumerate(getattr(index, "paths", [])) if path is not None]
                        or range(len(gallery)), dtype=np.int64)
        augmented = augment_gallery(gallery[live], n=int(p["n"]), alpha=float(p["alpha"]), backend=backend,
                                    budget_bytes=budget_bytes)
        found, _ = exact_knn(q, augmented, min(k, len(live)), self_pos=np.full(len(q), -1, dtype=np.int64),
                             backend=backend, budget_bytes=budget_bytes)
        found = np.asarray(found, dtype=np.int64)
        rows = np.where(found >= 0, live[np.maximum(found, 0)], -1)
    else:
        _, shortlist = index.search(q, max(k, int(p["shortlist"])))
        rows = k_reciprocal(q, gallery, _missing_last(shortlist), k1=int(p["k1"]), k2=int(p["k2"]),
                            lam=float(p["lambda"]), budget_bytes=budget_bytes)[:, :k]
    rows = np.asarray(rows, dtype=np.int64)
    sims = np.einsum("qd,qkd->qk", q, gallery[np.maximum(rows, 0)])
    return np.where(rows >= 0, sims, -np.inf).astype(np.float32), rows


def _missing_last(rows: np.ndarray) -> np.ndarray:
    """Each row's ``-1`` entries (slots an approximate index could not fill) moved to its end, order kept."""
    rows = np.asarray(rows, dtype=np.int64)
    order = np.argsort(rows < 0, axis=1, kind="stable")
    return np.take_along_axis(rows, order, axis=1)
