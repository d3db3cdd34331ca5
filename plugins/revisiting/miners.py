"""Triplet miners of Revisiting-DML (docs/methods/revisiting.md), written from the definitions there.

Every miner is called as ``miner(embeddings, labels)`` and returns ``(anchors, positives, negatives)``
as int64 tensors on the embeddings' device. Randomness comes from torch's global generator, which the
engine seeds and checkpoints. Distances are computed on detached embeddings.

How these differ from pytorch-metric-learning's similarly named miners:
    * ``distance_weighted`` vs PML ``DistanceWeightedMiner`` (registered as ``pml_distance_weighted``):
      PML keeps the paper's upper cut-off 1.4 (disabled in the reference code), subtracts one
      global maximum log-weight, zeroes infinite weights instead of clamping d̃ below 2, and draws one
      negative per anchor-positive *pair*; here every batch element is an anchor with one positive and
      one negative, i.e. B triplets.
    * ``semihard`` vs PML ``TripletMarginMiner(type_of_triplets="semihard")``: PML returns *every*
      semi-hard triplet and nothing when there is none; here one random positive per anchor, one
      negative drawn from the band ``d_ap < d_an < d_ap + margin``, a uniform negative when the band is
      empty.
"""

from __future__ import annotations

import torch


def pairwise_distances(embeddings: torch.Tensor, min_squared: float = 0.0) -> torch.Tensor:
    """``sqrt(clamp(||a||² + ||b||² − 2a·b, min_squared))`` of detached embeddings (B×B)."""
    x = embeddings.detach()
    squared = x.pow(2).sum(1)
    gram = x @ x.t()
    return (squared[:, None] + squared[None, :] - 2 * gram).clamp(min=min_squared).sqrt()


def distance_log_weights(distances: torch.Tensor, dim: int, lower_cutoff: float = 0.5) -> torch.Tensor:
    """Log-weights ``(2 − D)·ln d̃ − ((D − 3)/2)·ln(1 − d̃²/4)``, ``d̃ = clamp(d, λ, 2 − 1e-6)``.

    The definition and its cut-offs: docs/methods/revisiting.md.
    """
    clipped = distances.clamp(min=lower_cutoff, max=2.0 - 1e-6)
    return (2.0 - dim) * clipped.log() - ((dim - 3.0) / 2.0) * torch.log(1.0 - 0.25 * clipped.pow(2))


def _uniform_choice(mask: torch.Tensor) -> torch.Tensor:
    """One column per row, uniform among the True entries of ``mask`` (rows must have at least one)."""
    return torch.multinomial(mask.float(), 1).squeeze(1)


def _label_masks(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    return same & ~eye, ~same


class DistanceWeightedMiner(torch.nn.Module):
    """Distance-weighted sampling (Wu et al. 2017) as in Revisiting-DML (docs/methods/revisiting.md).

    Args:
        lower_cutoff: λ, distances below it are raised to it (0.5).
        upper_cutoff: Negatives at or beyond this distance get weight 0; ``None`` (default) as in the
            reference code, 1.4 as in the paper. Anchors left without a negative fall back to uniform.
        anchors: ``"all"`` (Revisiting: anchors without a partner use themselves as positive) or
            ``"with_positive"`` (DiVA / ooDML: only anchors whose class has another sample).
    """

    def __init__(self, lower_cutoff: float = 0.5, upper_cutoff: float | None = None, anchors: str = "all"):
        super().__init__()
        self.lower_cutoff = lower_cutoff
        self.upper_cutoff = upper_cutoff
        self.anchors = anchors

    def negative_probabilities(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """B×B matrix ``p(n | a)`` (rows sum to 1; all-zero rows for anchors without a negative)."""
        distances = pairwise_distances(embeddings)
        _, negative = _label_masks(labels)
        log_w = distance_log_weights(distances, embeddings.shape[1], self.lower_cutoff)
        allowed = negative.clone()
        if self.upper_cutoff is not None:
            within = allowed & (distances < self.upper_cutoff)
            # An anchor with no negative inside the cut-off keeps all its negatives (uniform fallback below).
            keep_all = ~within.any(1, keepdim=True)
            allowed = torch.where(keep_all, allowed, within)
            log_w = torch.where(keep_all & negative, torch.zeros_like(log_w), log_w)
        log_w = log_w.masked_fill(~allowed, float("-inf"))
        # Subtracting each row's maximum keeps exp() finite; -inf rows (no negative) stay all-zero.
        row_max = log_w.max(1, keepdim=True).values.clamp(min=-1e30)
        weights = torch.exp(log_w - row_max) * allowed
        totals = weights.sum(1, keepdim=True)
        return torch.where(totals > 0, weights / totals.clamp(min=1e-30), weights)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One (anchor, positive, negative) triplet per anchor."""
        labels = labels.to(embeddings.device)
        positive, _ = _label_masks(labels)
        probabilities = self.negative_probabilities(embeddings, labels)
        has_negative = probabilities.sum(1) > 0
        has_positive = positive.any(1)
        keep = has_negative & (has_positive if self.anchors == "with_positive" else torch.ones_like(has_positive))
        anchors = torch.nonzero(keep).squeeze(1)
        if len(anchors) == 0:
            return empty_triplets(embeddings.device)
        # Anchors without a partner use themselves as positive (the Revisiting fallback).
        positive_choice = positive[anchors] | (~has_positive[anchors, None] & _one_hot(anchors, len(labels)))
        positives = _uniform_choice(positive_choice)
        negatives = torch.multinomial(probabilities[anchors], 1).squeeze(1)
        return anchors, positives, negatives


class RhoDistanceMiner(DistanceWeightedMiner):
    """ρ-regularisation (docs/methods/revisiting.md): distance-weighted mining with a negative swap.

    With probability ``p_switch`` an anchor's triplet becomes ``(a, a, p')``: the positive slot holds the
    anchor itself and the negative slot a uniformly drawn *other* sample of the anchor's class, so the
    ranking loss pushes a same-class sample away. Anchors without a same-class partner are never switched.

    Args:
        p_switch: Swap probability.
        **kwargs: As :class:`DistanceWeightedMiner`.
    """

    def __init__(self, p_switch: float = 0.2, **kwargs):
        super().__init__(**kwargs)
        self.p_switch = p_switch

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Distance-weighted triplets, some of them switched to ``(a, a, p')``."""
        anchors, positives, negatives = super().forward(embeddings, labels)
        if len(anchors) == 0:
            return anchors, positives, negatives
        labels = labels.to(embeddings.device)
        positive, _ = _label_masks(labels)
        switchable = positive[anchors].any(1)
        switch = (torch.rand(len(anchors), device=embeddings.device) < self.p_switch) & switchable
        if switch.any():
            swapped = _uniform_choice(positive[anchors[switch]])
            positives = torch.where(switch, anchors, positives)
            negatives = negatives.clone()
            negatives[switch] = swapped
        return anchors, positives, negatives


def _anchors_with_both(embeddings: torch.Tensor, labels: torch.Tensor):
    """Anchors that have a positive and a negative in the batch, with label masks and their distance rows.

    Returns ``None`` when no anchor qualifies, else ``(anchors, positive, negative, distances)`` where the
    masks are full ``B×B`` and ``distances`` holds the anchors' rows only.
    """
    labels = labels.to(embeddings.device)
    positive, negative = _label_masks(labels)
    anchors = torch.nonzero(positive.any(1) & negative.any(1)).squeeze(1)
    if len(anchors) == 0:
        return None
    return anchors, positive, negative, pairwise_distances(embeddings)[anchors]


class SemihardMiner(torch.nn.Module):
    """Revisiting semi-hard mining (docs/methods/revisiting.md).

    Every anchor with a same-class partner gets one uniform positive ``p`` and a negative drawn
    uniformly from ``d_ap < d_an < d_ap + margin``, or uniformly from all negatives when that band is empty.

    Args:
        margin: Width of the semi-hard band (the loss's triplet margin, 0.2).
    """

    def __init__(self, margin: float = 0.2):
        super().__init__()
        self.margin = margin

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One semi-hard triplet per anchor that has a positive and a negative."""
        found = _anchors_with_both(embeddings, labels)
        if found is None:
            return empty_triplets(embeddings.device)
        anchors, positive, negative, distances = found
        positives = _uniform_choice(positive[anchors])
        d_ap = distances.gather(1, positives[:, None])
        band = negative[anchors] & (distances > d_ap) & (distances < d_ap + self.margin)
        candidates = torch.where(band.any(1, keepdim=True), band, negative[anchors])
        return anchors, positives, _uniform_choice(candidates)


class SofthardMiner(torch.nn.Module):
    """Revisiting soft-hard mining (docs/methods/revisiting.md).

    For each anchor with a positive and a negative: hard negatives are negatives closer than its farthest
    positive, hard positives are positives farther than its closest negative; one of each is drawn
    uniformly, falling back to all positives / negatives when a hard set is empty.
    """

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One soft-hard triplet per anchor that has a positive and a negative."""
        found = _anchors_with_both(embeddings, labels)
        if found is None:
            return empty_triplets(embeddings.device)
        anchors, positive, negative, distances = found
        pos, neg = positive[anchors], negative[anchors]
        farthest_positive = distances.masked_fill(~pos, float("-inf")).max(1, keepdim=True).values
        closest_negative = distances.masked_fill(~neg, float("inf")).min(1, keepdim=True).values
        hard_neg = neg & (distances < farthest_positive)
        hard_pos = pos & (distances > closest_negative)
        pos = torch.where(hard_pos.any(1, keepdim=True), hard_pos, pos)
        neg = torch.where(hard_neg.any(1, keepdim=True), hard_neg, neg)
        return anchors, _uniform_choice(pos), _uniform_choice(neg)


class RandomTripletMiner(torch.nn.Module):
    """Revisiting random mining (docs/methods/revisiting.md): valid triplets drawn without replacement.

    Args:
        num_triplets: Triplets per batch; ``None`` means the batch size. All valid triplets are returned
            when there are fewer.
    """

    def __init__(self, num_triplets: int | None = None):
        super().__init__()
        self.num_triplets = num_triplets

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A uniform sample of all (a, p, n) with y_a = y_p, a ≠ p, y_n ≠ y_a."""
        labels = labels.to(embeddings.device)
        positive, negative = _label_masks(labels)
        valid = positive[:, :, None] & negative[:, None, :]
        triplets = torch.nonzero(valid)
        wanted = self.num_triplets or len(labels)
        if len(triplets) > wanted:
            triplets = triplets[torch.randperm(len(triplets), device=triplets.device)[:wanted]]
        return triplets[:, 0], triplets[:, 1], triplets[:, 2]


def _one_hot(rows: torch.Tensor, size: int) -> torch.Tensor:
    out = torch.zeros(len(rows), size, dtype=torch.bool, device=rows.device)
    out[torch.arange(len(rows), device=rows.device), rows] = True
    return out


def empty_triplets(device: torch.device) -> tuple[torch.Tensor, ...]:
    """Three empty int64 index tensors on ``device``: what a miner returns when it finds no triplet."""
    empty = torch.empty(0, dtype=torch.long, device=device)
    return empty, empty.clone(), empty.clone()
