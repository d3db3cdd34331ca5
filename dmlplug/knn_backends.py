"""The kNN backend names: one list shared by the recipe schema, its generated docs and the kNN search.

Kept in a module of its own, free of numpy and torch, so that ``dmlplug validate`` can check
``[evaluation] backend`` against exactly the names :func:`dmlplug.evaluation.knn.resolve_backend` accepts.
"""

from __future__ import annotations

#: Every accepted ``backend``: ``auto`` picks one (see :func:`dmlplug.evaluation.knn.resolve_backend`).
KNN_BACKENDS: tuple[str, ...] = ("auto", "faiss-cpu", "faiss-gpu", "torch")

#: What each name means, for the recipe reference (docs/recipes.md).
KNN_BACKEND_HELP = (
    "auto = faiss-gpu for data on a GPU when faiss sees one, else torch on GPU, faiss-cpu on CPU, else torch; "
    "faiss-cpu / faiss-gpu need faiss (faiss-gpu: its GPU build, dmlplug[gpu]); torch always works"
)
