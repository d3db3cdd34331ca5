"""S2SD: Simultaneous Similarity-based Self-Distillation (Roth et al., 2021; docs/methods/s2sd.md).

Next to the base embedding (the only one used at test time) S2SD trains auxiliary high-dimensional "target"
heads on the backbone's pooled features, each with its own instance of the recipe's DML criterion, and distils
every target space's batch similarity matrix into the base space with a temperature-softened row-wise KL
divergence (teacher detached). Optionally the base space is also distilled from the similarity matrix of the
pooled backbone features themselves ("feature distillation"), once an iteration counter reaches a delay.

The engine computes the base loss ``L_src`` as the recipe's ``[loss]`` term; this module returns the rest of

    L = ½ · (L_src + mean_k L_tgt_k) + w · mean_k KL_k + w_f · KL_f

(``target_weight`` = ½; the recipe gives ``[loss] weight = 0.5``).

Imported only by the S2SD factory: it imports torch at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dmlplug_builtins.s2sd import CRITERIA_GROUP, HEADS_GROUP


def similarity_kl(teacher: torch.Tensor, student: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Row-wise relational distillation ``T²/B · Σ_i KL(softmax(teacher_i/T) ‖ softmax(student_i/T))``.

    Args:
        teacher: ``B×B`` teacher similarity matrix; it is detached (no gradient reaches the teacher).
        student: ``B×B`` student similarity matrix (diagonal included, as in the reference).
        temperature: Softmax temperature ``T``.

    Returns:
        The scalar KL term, summed over all ``B×B`` entries, divided by ``B`` (rows) and multiplied by ``T²``.
    """
    batch = student.shape[0]
    log_student = F.log_softmax(student.float() / temperature, dim=1)
    target = F.softmax(teacher.detach().float() / temperature, dim=1)
    # kl_div(input=log p_student, target=p_teacher) = Σ p_teacher · (log p_teacher − log p_student).
    return F.kl_div(log_student, target, reduction="sum") * temperature**2 / batch


def cosine_similarity_matrix(x: torch.Tensor) -> torch.Tensor:
    """``n(x) n(x)ᵀ`` with ``n`` the row-wise L2 normalisation (the reference re-normalises)."""
    unit = F.normalize(x.float(), dim=-1)
    return unit @ unit.t()


class TargetHead(nn.Module):
    """``normalize(Linear(F→D) → ReLU → Linear(D→D))``: one auxiliary target embedding space."""

    def __init__(self, in_features: int, dim: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.dim = dim

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Embed the auxiliary features; returns ``B×D`` unit vectors."""
        return F.normalize(self.net(features), dim=-1)


class S2SD(nn.Module):
    """The S2SD regularizer: target heads, their criteria, and the similarity distillation.

    Args:
        in_features: Size ``F`` of the backbone's pooled features.
        target_dims: Dimension ``D_k`` of each target head.
        make_criterion: ``make_criterion(dim)`` returns a fresh instance of the DML criterion for a
            ``dim``-dimensional embedding, called ``(embeddings, labels, indices_tuple)``.
        make_miner: Optional ``make_miner()`` returning a fresh miner applied to each target embedding
            (``None`` from it: no miner).
        temperature: Softmax temperature ``T`` of the distillation.
        distill_weight: ``w``, weight of ``mean_k KL_k``.
        target_weight: Weight of ``mean_k L_tgt_k`` (½ in the reference, with ``[loss] weight = 0.5``).
        feature_distill: Also distil the pooled features' similarity matrix into the base space.
        feature_weight: ``w_f``, weight of ``KL_f``.
        feature_delay: ``KL_f`` starts once the iteration counter reaches this value.
        pool_aggr: Targets (and the feature teacher) read ``avgpool(M) + maxpool(M)`` of the feature map
            ``M`` instead of the backbone's pooled features.
        lr_mult: Learning-rate multiplier of the target heads' and criteria's optimizer groups.
        weight_decay: Weight decay of those groups (0: the reference creates them without weight decay).
    """

    iteration: torch.Tensor  # a buffer registered in __init__ (nn.Module's __getattr__ types it Tensor | Module)

    def __init__(
        self,
        in_features: int,
        target_dims: Sequence[int],
        make_criterion: Callable[[int], Any],
        make_miner: Callable[[], Any] | None = None,
        *,
        temperature: float = 1.0,
        distill_weight: float = 50.0,
        target_weight: float = 0.5,
        feature_distill: bool = False,
        feature_weight: float = 50.0,
        feature_delay: int = 1000,
        pool_aggr: bool = False,
        lr_mult: float = 1.0,
        weight_decay: float = 0.0,
    ):
        super().__init__()
        self.target_dims = [int(d) for d in target_dims]
        self.heads = nn.ModuleList(TargetHead(in_features, d) for d in self.target_dims)
        # A separate criterion per target: criteria with embedding-sized parameters get the target's size.
        self.criteria = nn.ModuleList(_as_module(make_criterion(d)) for d in self.target_dims)
        miners = [make_miner() for _ in self.target_dims] if make_miner is not None else []
        self.miners = (nn.ModuleList(_as_module(m) for m in miners)
                       if miners and all(m is not None for m in miners) else None)
        self.temperature = float(temperature)
        self.distill_weight = float(distill_weight)
        self.target_weight = float(target_weight)
        self.feature_distill = bool(feature_distill)
        self.feature_weight = float(feature_weight)
        self.feature_delay = int(feature_delay)
        self.pool_aggr = bool(pool_aggr)
        self.lr_mult = float(lr_mult)
        self.weight_decay = float(weight_decay)
        # Training iterations seen so far (persistent: a resumed run keeps the feature-distillation delay).
        self.register_buffer("iteration", torch.zeros((), dtype=torch.long))

    def auxiliary_features(self, step: Any) -> torch.Tensor:
        """``f_aux``: avg+max pooled feature map with ``pool_aggr``, else the pooled features (not detached)."""
        if self.pool_aggr:
            if step.feature_map is None:
                raise ValueError("S2SD pool_aggr needs the backbone's feature map, but the step has none")
            fmap = step.feature_map
            return fmap.mean((2, 3)) + fmap.amax((2, 3))
        if step.features is None:
            raise ValueError("S2SD needs the backbone's pooled features, but the step has none")
        return step.features

    def forward(self, step: Any) -> dict[str, torch.Tensor]:
        """The S2SD terms of one training step.

        Returns:
            ``{"targets": target_weight · mean_k L_tgt_k, "distill": w · mean_k KL_k}`` and, once feature
            distillation is active, ``"features": w_f · KL_f``.
        """
        labels = step.labels
        # The reference re-normalises the base embedding inside the loss; fp32 for the softmax.
        student = cosine_similarity_matrix(step.embeddings)
        f_aux = self.auxiliary_features(step).float()
        target_losses, kls = [], []
        for k, (head, criterion) in enumerate(zip(self.heads, self.criteria, strict=True)):
            z_k = head(f_aux)
            indices_tuple = self.miners[k](z_k, labels) if self.miners is not None else None
            target_losses.append(criterion(z_k, labels, indices_tuple))
            kls.append(similarity_kl(z_k @ z_k.t(), student, self.temperature))
        terms = {
            "targets": self.target_weight * torch.stack(target_losses).mean(),
            "distill": self.distill_weight * torch.stack(kls).mean(),
        }
        if self.feature_distill and int(self.iteration) >= self.feature_delay:
            teacher = cosine_similarity_matrix(f_aux.detach())
            terms["features"] = self.feature_weight * similarity_kl(teacher, student, self.temperature)
        if self.training:
            self.iteration += 1
        return terms

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """Target heads in group ``s2sd`` and the target criteria's parameters in ``s2sd_criteria``.

        Both without weight decay and at ``lr_mult`` × the base lr (docs/methods/s2sd.md; the reference trains the
        criteria's parameters at the base lr as well).
        """
        groups = [{"name": HEADS_GROUP, "params": list(self.heads.parameters()), "lr_mult": self.lr_mult,
                   "weight_decay": self.weight_decay}]
        criterion_params = list(self.criteria.parameters())
        if criterion_params:
            groups.append({"name": CRITERIA_GROUP, "params": criterion_params, "lr_mult": self.lr_mult,
                           "weight_decay": self.weight_decay})
        return groups

    def extra_repr(self) -> str:
        """Target dims and weights, shown by ``print(module)``."""
        return (f"target_dims={self.target_dims}, T={self.temperature}, w={self.distill_weight}, "
                f"feature_distill={self.feature_distill} (w_f={self.feature_weight}, delay={self.feature_delay}), "
                f"pool_aggr={self.pool_aggr}")


class _CallableLoss(nn.Module):
    # Wraps a criterion that is not an nn.Module so it can live in a ModuleList.
    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _as_module(criterion: Any) -> nn.Module:
    return criterion if isinstance(criterion, nn.Module) else _CallableLoss(criterion)
