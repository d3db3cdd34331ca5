"""The maths of DiVA's auxiliary terms (docs/methods/diva.md), as plain functions and small modules.

* :class:`GradientReversal` / :func:`gradient_reversal` — identity forward, negated gradient backward.
* :class:`LabelPermutingMiner` — the "shared" miner: a miner (distance-weighted) run on randomly permuted labels.
* :class:`IntraClassMiner` — the "intra" miner: B triplets drawn with replacement inside one random class.
* :func:`negative_weights` / :func:`momentum_contrast_loss` — DiVA's fast-MoCo ("DaNCE") term with
  distance-weighted negative logits.
* :func:`decorrelation` — the gradient-reversed correlation ``mean((t̂ ⊙ normalize(R(ŝ)))²)``.

Imported only by the DiVA factory (torch at module level).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from dmlplug_builtins.revisiting.miners import distance_log_weights, empty_triplets


class GradientReversal(torch.autograd.Function):
    """Identity in the forward pass, gradient times −1 in the backward pass (static autograd Function)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 - documented on the class
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return -grad_output


def gradient_reversal(x: torch.Tensor) -> torch.Tensor:
    """Apply :class:`GradientReversal` to ``x``."""
    return GradientReversal.apply(x)


class LabelPermutingMiner(nn.Module):
    """DiVA's "random_distance" miner for the shared space (docs/methods/diva.md).

    The batch's label vector is permuted at random and ``inner`` mines on the permuted labels. With DiVA's
    inner miner (miner ``distance_weighted``, ``anchors = "with_positive"``, no upper cut-off as in the
    reference code) every anchor that has another sample with the same *permuted* label gets a uniform
    "positive" among those and a distance-weighted negative (docs/methods/revisiting.md) among the samples
    whose permuted label differs. The Margin loss then indexes β with the anchor's *true* label, so the caller keeps the
    original labels.

    Args:
        inner: Triplet miner ``inner(embeddings, labels) -> (anchors, positives, negatives)``.
    """

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor,
                permutation: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Triplets ``(anchors, positives, negatives)`` mined on ``labels[permutation]``.

        Args:
            embeddings: ``B×D`` embeddings of the shared head.
            labels: ``B`` true labels.
            permutation: The label permutation (``None``: ``torch.randperm`` from the global generator).
        """
        labels = labels.to(embeddings.device)
        if permutation is None:
            permutation = torch.randperm(len(labels), device=labels.device)
        return self.inner(embeddings, labels[permutation.to(labels.device)])


class IntraClassMiner(nn.Module):
    """DiVA's "intra_random" miner (docs/methods/diva.md).

    ``num_triplets`` triplets (default: the batch size); for each one a class present in the batch is
    chosen uniformly, then anchor, positive and negative are drawn uniformly **with replacement** from
    that class's samples (``a = p`` or ``a = n`` can happen; the Margin loss's ``1e-8`` keeps it finite).

    Args:
        num_triplets: Triplets per batch (``None``: the batch size).
    """

    def __init__(self, num_triplets: int | None = None):
        super().__init__()
        self.num_triplets = num_triplets

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Triplets ``(anchors, positives, negatives)``, all three members of one class each."""
        labels = labels.to(embeddings.device)
        if len(labels) == 0:
            return empty_triplets(embeddings.device)
        count = self.num_triplets or len(labels)
        classes = torch.unique(labels)
        chosen = classes[torch.randint(len(classes), (count,), device=labels.device)]
        members = (chosen[:, None] == labels[None, :]).float()  # count × B, one row per triplet's class
        draws = torch.multinomial(members, 3, replacement=True)
        return draws[:, 0], draws[:, 1], draws[:, 2]


def negative_weights(
    similarities: torch.Tensor,
    dim: int,
    *,
    lower_cutoff: float = 0.5,
    upper_cutoff: float = 1.4,
    normalize: Literal["column", "row"] = "column",
) -> torch.Tensor:
    """Distance-based weights of the negative logits (docs/methods/diva.md), detached.

    With ``d = sqrt(max(0, 2 − 2s))`` clamped to ``[lower_cutoff, 2 − 1e-6]`` (the upper clamp only keeps
    ``ln(1 − d²/4)`` finite at antipodal points), ``ln w = (2 − D)·ln d − ((D − 3)/2)·ln(1 − d²/4)``,
    ``w = exp(ln w − max)``, ``w = 0`` where the unclamped ``d > upper_cutoff``, ``w ≥ 1e-45``, then
    normalised.

    Args:
        similarities: ``B×K`` cosine similarities of queries (rows) and queue keys (columns).
        dim: Embedding dimension ``D``.
        lower_cutoff: Distances below it are raised to it.
        upper_cutoff: Keys farther than this get the floor weight.
        normalize: ``"column"`` (reference default: maximum over the whole matrix, each key column sums to 1
            over the queries) or ``"row"`` (``--diva_fixed``: maximum and normalisation per query row).
    """
    s = similarities.detach().float()
    distances = (2.0 - 2.0 * s).clamp(min=0.0).sqrt()
    log_w = distance_log_weights(distances, dim, lower_cutoff)
    peak = log_w.max(dim=1, keepdim=True).values if normalize == "row" else log_w.max()
    weights = torch.exp(log_w - peak)
    weights = weights.masked_fill(distances > upper_cutoff, 0.0).clamp(min=1e-45)
    axis = 1 if normalize == "row" else 0
    return weights / weights.sum(dim=axis, keepdim=True)


def momentum_contrast_loss(
    queries: torch.Tensor,
    keys: torch.Tensor,
    queue: torch.Tensor,
    temperature: float,
    *,
    lower_cutoff: float = 0.5,
    upper_cutoff: float = 1.4,
    normalize: Literal["column", "row"] = "column",
) -> torch.Tensor:
    """DiVA's fast-MoCo / DaNCE term, computed in fp32.

    ``l_pos[b] = q_b·k_b``, ``l_neg = (q Qᵀ) ⊙ W`` (weights multiply the similarities, not their
    exponentials), ``loss = CE([l_pos, l_neg] / τ, target 0)`` averaged over the batch. With an empty
    queue the only logit is the positive one and the loss is 0.

    Args:
        queries: ``B×D`` unit-norm query embeddings (with gradient).
        keys: ``B×D`` unit-norm key embeddings of the EMA model on the second view (detached here).
        queue: ``K×D`` unit-norm keys of earlier steps (the negatives).
        temperature: τ.
        lower_cutoff: See :func:`negative_weights`.
        upper_cutoff: See :func:`negative_weights`.
        normalize: See :func:`negative_weights`.
    """
    with torch.autocast(device_type=queries.device.type, enabled=False):
        q = queries.float()
        positive = (q * keys.detach().float()).sum(dim=1, keepdim=True)
        similarities = q @ queue.detach().float().t()
        if similarities.shape[1]:
            weights = negative_weights(similarities, q.shape[1], lower_cutoff=lower_cutoff,
                                       upper_cutoff=upper_cutoff, normalize=normalize)
            similarities = similarities * weights
        logits = torch.cat([positive, similarities], dim=1) / temperature
        target = torch.zeros(len(q), dtype=torch.long, device=q.device)
        return F.cross_entropy(logits, target)


def decorrelation(source: torch.Tensor, target: torch.Tensor, regressor: nn.Module) -> torch.Tensor:
    """Correlation ``C = mean_b mean_j (t̂_bj · r_bj)²`` of one direction source → target (docs/methods/diva.md).

    ``ŝ = normalize(GR(source))``, ``t̂ = normalize(GR(target))``, ``r = normalize(regressor(ŝ))``. The
    caller adds ``−ρ·C``: the regressor (plain gradient) learns to predict the target from the source, the
    embeddings (reversed gradient) make that prediction fail.
    """
    s_hat = F.normalize(gradient_reversal(source), dim=-1)
    t_hat = F.normalize(gradient_reversal(target), dim=-1)
    r = F.normalize(regressor(s_hat), dim=-1)
    return (t_hat * r).pow(2).mean()
