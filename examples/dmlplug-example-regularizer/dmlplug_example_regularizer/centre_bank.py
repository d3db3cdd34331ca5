"""The centre-bank regularizer (torch).

For a batch of L2-normalised embeddings ``e_i`` with labels ``y_i`` and class centres ``c_k``:

* pull = mean_i ‖e_i − c_{y_i}‖² (the centre loss);
* contrast = mean_i −log softmax_k(−‖e_i − c_k‖² / T)_{y_i}, over the classes that have a centre;

both only over samples whose class already has a centre. The centres are not trained by gradient: after every
optimizer step each class in the batch moves its centre towards the batch mean of its embeddings,
``c = m·c + (1−m)·mean`` (the first time: ``c = mean``). T = exp(log_temperature) is a parameter.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

#: Name of the optimizer group of the temperature.
GROUP = "example_centre_bank"


class CentreBank(nn.Module):
    """Class centres kept by EMA in persistent buffers, and a learned temperature.

    Args:
        num_classes: Number of training classes C.
        embedding_size: Embedding size D.
        momentum: EMA momentum m of the centres.
        temperature: Initial temperature T.
        pull_weight: Weight of the pull term.
        contrast_weight: Weight of the contrast term.
        lr_mult: Learning-rate multiplier of the temperature's group.

    Attributes:
        centres: ``C×D`` buffer of class centres (zeros until a class is first seen).
        counts: ``C`` buffer: how many EMA updates each centre has had (0 = no centre yet).
        updates: Scalar buffer: optimizer steps seen.
        log_temperature: Scalar parameter, ``log T``.
    """

    # The buffers registered in __init__ (nn.Module's __getattr__ types attributes as Tensor | Module).
    centres: torch.Tensor
    counts: torch.Tensor
    updates: torch.Tensor

    def __init__(self, num_classes: int, embedding_size: int, *, momentum: float = 0.9, temperature: float = 0.1,
                 pull_weight: float = 1.0, contrast_weight: float = 1.0, lr_mult: float = 10.0):
        super().__init__()
        self.momentum, self.pull_weight, self.contrast_weight, self.lr_mult = (
            momentum, pull_weight, contrast_weight, lr_mult)
        self.register_buffer("centres", torch.zeros(num_classes, embedding_size))
        self.register_buffer("counts", torch.zeros(num_classes, dtype=torch.long))
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))
        self.log_temperature = nn.Parameter(torch.tensor(math.log(temperature)))

    @property
    def temperature(self) -> torch.Tensor:
        """T = exp(log_temperature)."""
        return self.log_temperature.exp()

    def forward(self, step: Any) -> dict[str, torch.Tensor]:
        """``{"pull": ..., "contrast": ...}`` for a :class:`dmlplug.step.StepOutput` (weights applied)."""
        embeddings = step.embeddings.float()
        labels = step.labels.to(embeddings.device)
        seen = self.counts > 0
        has_centre = seen[labels]
        if not bool(has_centre.any()):  # first step: no centre yet; zero terms that keep the graph
            zero = embeddings.sum() * 0 + self.log_temperature * 0
            return {"pull": zero, "contrast": zero}
        # ‖e − c‖² = ‖e‖² + ‖c‖² − 2 e·c: B×C without a B×C×D tensor.
        distances = ((embeddings ** 2).sum(1, keepdim=True) + (self.centres ** 2).sum(1)[None]
                     - 2 * embeddings @ self.centres.t()).clamp_min(0)
        rows, own = distances[has_centre], labels[has_centre]
        pull = rows.gather(1, own[:, None]).mean()
        column = torch.cumsum(seen.long(), 0) - 1  # class -> column among the classes with a centre
        contrast = F.cross_entropy(-rows[:, seen] / self.temperature, column[own])
        return {"pull": self.pull_weight * pull, "contrast": self.contrast_weight * contrast}

    @torch.no_grad()
    def after_optimizer_step(self, step: Any) -> None:
        """Move the centres of the step's classes towards their batch means (called by the engine)."""
        embeddings = step.embeddings.detach().float()
        labels = step.labels.to(embeddings.device)
        sums = torch.zeros_like(self.centres).index_add_(0, labels, embeddings)
        sizes = torch.bincount(labels, minlength=len(self.counts))
        present = sizes > 0
        means = sums[present] / sizes[present, None]
        old = self.centres[present]
        first = (self.counts[present] == 0)[:, None]
        self.centres[present] = torch.where(first, means, self.momentum * old + (1 - self.momentum) * means)
        self.counts[present] += 1
        self.updates += 1

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """The temperature in a group of its own, with its own learning-rate multiplier and no weight decay."""
        return [{"name": GROUP, "params": [self.log_temperature], "lr_mult": self.lr_mult, "weight_decay": 0.0}]
