"""NIR: Non-Isotropy Regularisation for proxy-based losses (Roth et al., CVPR 2022; docs/methods/nir.md).

A conditional flow must explain each embedding as a bijective translation of a Gaussian residual around
its class proxy. The term returned here is the flow part of the NIR objective,
``mean_b exp(½‖z_b‖² − log|det J_b|)``; the ω-weighted proxy loss is the recipe's own loss (see
docs/methods/nir.md).

Imported only by the NIR factory: it imports torch at module level.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dmlplug.errors import RunError
from dmlplug.proxies import class_proxies
from dmlplug_builtins.nir import FLOW_GROUP


class NonIsotropyRegularizer(nn.Module):
    """The NIR flow term of one training step.

    Args:
        flow: Conditional flow, ``flow(x, context=c) -> (z, logabsdet)`` in the data → latent direction.
        loss: The loss whose proxies condition the flow, used when a step carries no ``loss_module``. It is
            kept out of this module's parameters: the proxies belong to the loss's optimizer group.
        lr_mult: Learning-rate multiplier of the flow's optimizer group.
        weight_decay: Weight decay of the flow's group (``None``: the optimizer's default).
        proxy_backprop: Whether the flow term sends gradients into the proxies.
    """

    def __init__(
        self,
        flow: nn.Module,
        loss: Any,
        *,
        lr_mult: float = 50.0,
        weight_decay: float | None = 0.0,
        proxy_backprop: bool = True,
    ):
        super().__init__()
        self.flow = flow
        # A tuple hides the loss from nn.Module's registration (no duplicated proxies in parameters()).
        self._fallback_loss = (loss,)
        self.lr_mult = lr_mult
        self.weight_decay = weight_decay
        self.proxy_backprop = proxy_backprop

    def forward(self, step: Any) -> dict[str, torch.Tensor]:
        """Return ``{"flow": mean_b exp(½‖z_b‖² − logdet_b)}`` for the batch of ``step``.

        Args:
            step: A :class:`dmlplug.step.StepOutput` (normalised embeddings, labels, loss module).
        """
        nll = self.negative_log_likelihood(step.embeddings, step.labels, self._proxies(step))
        # exp per sample before the mean, as the reference does (docs/methods/nir.md).
        return {"flow": torch.exp(nll).mean()}

    def negative_log_likelihood(
        self, embeddings: torch.Tensor, labels: torch.Tensor, proxies: torch.Tensor
    ) -> torch.Tensor:
        """Per-sample ``½‖z‖² − log|det J|`` (no Gaussian constant), in fp32 whatever the autocast state.

        Args:
            embeddings: ``B×D`` normalised embeddings.
            labels: ``B`` int64 class labels.
            proxies: ``C×D'`` class proxies (normalised here to form the condition).
        """
        # The term is exponentiated: in half precision exp overflows from ℓ ≈ 11, so run the flow in fp32.
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            conditions = F.normalize(proxies.float(), dim=1)[labels]
            if not self.proxy_backprop:
                conditions = conditions.detach()
            z, logabsdet = self.flow(embeddings.float(), context=conditions)
            return 0.5 * z.pow(2).sum(dim=1) - logabsdet

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """One group with the flow's parameters (the proxies stay in the loss's group)."""
        return [
            {
                "name": FLOW_GROUP,
                "params": list(self.flow.parameters()),
                "lr_mult": self.lr_mult,
                "weight_decay": self.weight_decay,
            }
        ]

    def _proxies(self, step: Any) -> torch.Tensor:
        loss = step.loss_module if step.loss_module is not None else self._fallback_loss[0]
        try:
            return class_proxies(loss)
        except TypeError as exc:
            raise RunError(
                f"the NIR regularizer needs class proxies but the step's loss has none ({exc})",
                where="regularizers: nir",
                fix="pair NIR with a proxy-based loss (a loss tagged 'proxies' in `dmlplug list losses`)",
            ) from None
