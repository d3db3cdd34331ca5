"""TCM: Threshold-Consistent Margin regularizer (Zhang et al., 2023; docs/methods/tcm.md).

Penalises positive pairs whose cosine similarity is at most ``m⁺`` and negative pairs whose similarity is at
least ``m⁻``, each term averaged over its hard pairs only, so that one threshold suits every class.

Imported only by the TCM factory: it imports torch at module level.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def tcm_terms(
    embeddings: torch.Tensor, labels: torch.Tensor, margin_plus: float, margin_minus: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The positive and negative TCM terms (before the λ weights), computed in fp32.

    Args:
        embeddings: ``B×D`` embeddings (cosine similarity is used, so they need not be normalised).
        labels: ``B`` integer labels.
        margin_plus: ``m⁺``: a positive pair is hard when its similarity is ``≤ m⁺``.
        margin_minus: ``m⁻``: a negative pair is hard when its similarity is ``≥ m⁻``.

    Returns:
        ``(pos, neg)``: mean of ``m⁺ − s`` over hard positives and of ``s − m⁻`` over hard negatives; a term
        with no hard pair is an exact zero that still belongs to the autograd graph.
    """
    # Margins are compared against similarities near 0.9, where bf16 has a step of 0.004: stay in fp32.
    with torch.autocast(device_type=embeddings.device.type, enabled=False):
        unit = F.normalize(embeddings.float(), dim=1)
        similarity = unit @ unit.t()
    same = labels.view(-1, 1) == labels.view(1, -1)
    off_diagonal = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    # Ordered pairs: each unordered pair counts twice in numerator and denominator alike, so means agree.
    hard_pos = same & off_diagonal & (similarity <= margin_plus)
    hard_neg = ~same & (similarity >= margin_minus)
    pos = _mean_over(margin_plus - similarity, hard_pos)
    neg = _mean_over(similarity - margin_minus, hard_neg)
    return pos, neg


def _mean_over(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # where() rather than multiplication keeps masked-out entries from contributing NaN/inf gradients.
    total = torch.where(mask, values, torch.zeros_like(values)).sum()
    return total / mask.sum().clamp(min=1)


class ThresholdConsistentMargin(nn.Module):
    """``λ⁺ · pos + λ⁻ · neg`` of :func:`tcm_terms` for a training step; it has no parameters.

    Args:
        margin_plus: ``m⁺``.
        margin_minus: ``m⁻``.
        lambda_plus: ``λ⁺``.
        lambda_minus: ``λ⁻``.
    """

    def __init__(self, margin_plus: float = 0.9, margin_minus: float = 0.5,
                 lambda_plus: float = 1.0, lambda_minus: float = 1.0):
        super().__init__()
        self.margin_plus = margin_plus
        self.margin_minus = margin_minus
        self.lambda_plus = lambda_plus
        self.lambda_minus = lambda_minus

    def forward(self, step: Any) -> torch.Tensor:
        """Return the scalar TCM term of ``step.embeddings`` and ``step.labels``."""
        pos, neg = tcm_terms(step.embeddings, step.labels, self.margin_plus, self.margin_minus)
        return self.lambda_plus * pos + self.lambda_minus * neg

    def extra_repr(self) -> str:
        """The margins and weights, shown by ``print(module)``."""
        return (f"margin_plus={self.margin_plus}, margin_minus={self.margin_minus}, "
                f"lambda_plus={self.lambda_plus}, lambda_minus={self.lambda_minus}")
