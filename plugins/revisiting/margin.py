"""Margin loss with learnable class boundaries β, as in Revisiting-DML (docs/methods/revisiting.md).

Imported only by factories (it imports torch at module level).
"""

from __future__ import annotations

import torch
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from dmlplug_builtins.revisiting import BETA_GROUP


class RevisitingMarginLoss(torch.nn.Module):
    """Margin loss (Wu et al. 2017) on mined triplets, exactly as defined in docs/methods/revisiting.md.

    For triplets ``(a, p, n)``: ``d = sqrt(||x_a - x||² + 1e-8)``, ``β = β_{y_a}``,
    ``ℓ⁺ = max(0, d_ap − β + α)``, ``ℓ⁻ = max(0, β − d_an + α)`` and
    ``L = Σ(ℓ⁺ + ℓ⁻) / N`` where ``N`` is the number of strictly positive terms (``"terms"``, the definition and
    pytorch-metric-learning) or of triplets with at least one positive term (``"triplets"``: the
    reference code adds two boolean tensors, which PyTorch evaluates as a logical or). ``N = 0`` gives
    the plain sum (0). With ``nu > 0`` the reference's β regulariser ``ν · Σ_t β_{y_a(t)}`` is added.

    Without a miner every valid triplet of the batch is used; pairs from a pair miner are converted to
    triplets sharing an anchor (pytorch-metric-learning's convention).

    Args:
        num_classes: Number of training classes (size of β when ``per_class_beta``).
        margin: Triplet margin α.
        beta: Initial boundary β₀.
        learn_beta: Whether β is a trainable parameter.
        per_class_beta: One β per class (else one shared β).
        nu: Weight of the β regulariser.
        normalizer: ``"terms"`` or ``"triplets"`` (see above).
    """

    def __init__(self, num_classes: int, margin: float = 0.2, beta: float = 1.2, learn_beta: bool = True,
                 per_class_beta: bool = True, nu: float = 0.0, normalizer: str = "terms"):
        super().__init__()
        self.num_classes = num_classes
        self.margin = margin
        self.nu = nu
        self.normalizer = normalizer
        init = torch.full((num_classes if per_class_beta else 1,), float(beta))
        if learn_beta:
            self.beta = torch.nn.Parameter(init)
        else:
            self.register_buffer("beta", init)

    def optimizer_param_groups(self) -> list[dict]:
        """β gets its own group without weight decay (the reference trains β with plain lr 5e-4)."""
        if not isinstance(self.beta, torch.nn.Parameter):
            return []
        return [{"name": BETA_GROUP, "params": [self.beta], "lr_mult": 1.0, "weight_decay": 0.0}]

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, indices_tuple: tuple | None = None):
        """Loss of the mined triplets (all triplets without a miner)."""
        labels = labels.to(embeddings.device)
        anchors, positives, negatives = lmu.convert_to_triplets(indices_tuple, labels, labels, t_per_anchor="all")
        if len(anchors) == 0:
            # Keep the graph connected so backward() works on a batch without a valid triplet.
            return embeddings.sum() * 0.0 + self.beta.sum() * 0.0
        d_ap = ((embeddings[anchors] - embeddings[positives]).pow(2).sum(1) + 1e-8).sqrt()
        d_an = ((embeddings[anchors] - embeddings[negatives]).pow(2).sum(1) + 1e-8).sqrt()
        beta = self.beta[labels[anchors]] if len(self.beta) > 1 else self.beta.expand(len(anchors))
        pos_loss = torch.relu(d_ap - beta + self.margin)
        neg_loss = torch.relu(beta - d_an + self.margin)
        if self.normalizer == "triplets":
            count = ((pos_loss > 0) | (neg_loss > 0)).sum()
        else:
            count = (pos_loss > 0).sum() + (neg_loss > 0).sum()
        total = (pos_loss + neg_loss).sum()
        loss = total / count if count > 0 else total
        if self.nu:
            loss = loss + self.nu * beta.sum()
        return loss
