"""The Manhattan (L1) distance as a pytorch-metric-learning distance (torch).

For embeddings ``q_i`` and ``r_j`` (L2-normalised first when ``normalize_embeddings``), the distance is
``d(q_i, r_j) = Σ_k |q_ik − r_jk|``. It is a distance, not a similarity (``is_inverted = False``): PML losses
pull positives to small values and push negatives to large ones, exactly as with ``lp_distance``.
"""

from __future__ import annotations

import torch
from pytorch_metric_learning.distances import BaseDistance


class ManhattanDistance(BaseDistance):
    """L1 distance between embeddings, in PML's ``BaseDistance`` convention.

    Normalisation (``normalize_embeddings``) and the norms PML records are L2 (``p = 2``), as for PML's own
    distances, so embeddings lie on the unit sphere that dmlplug's models produce; only the distance is L1.

    Args:
        normalize_embeddings: L2-normalise the embeddings before measuring.
        power: Raise every distance to this power (PML's ``power``).
    """

    def __init__(self, normalize_embeddings: bool = True, power: float = 1.0):
        super().__init__(normalize_embeddings=normalize_embeddings, p=2, power=power, is_inverted=False)

    def compute_mat(self, query_emb: torch.Tensor, ref_emb: torch.Tensor | None) -> torch.Tensor:
        """``Q×R`` matrix of L1 distances (``torch.cdist`` with ``p = 1``; computed in float32 for half inputs)."""
        if ref_emb is None:
            ref_emb = query_emb
        dtype = query_emb.dtype
        if dtype in (torch.float16, torch.bfloat16):  # cdist has no half-precision kernel everywhere
            return torch.cdist(query_emb.float(), ref_emb.float(), p=1).to(dtype)
        return torch.cdist(query_emb, ref_emb, p=1)

    def pairwise_distance(self, query_emb: torch.Tensor, ref_emb: torch.Tensor) -> torch.Tensor:
        """L1 distance of each row of ``query_emb`` to the same row of ``ref_emb`` (a vector of length N)."""
        return (query_emb - ref_emb).abs().sum(dim=1)
