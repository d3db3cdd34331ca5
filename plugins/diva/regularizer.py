"""DiVA: Diverse Visual Feature Aggregation (Milbich et al., ECCV 2020; docs/methods/diva.md).

The regularizer owns everything of DiVA except the discriminative Margin loss, which is the recipe's
``[loss]`` applied to the ``discriminative`` named embedding (``[loss] embedding = "discriminative"``):

* ``shared``: Margin loss (own β) on the shared head with the label-permuting distance miner;
* ``intra``: Margin loss (own β) on the intra-class head with the intra-class random miner;
* ``selfsim``: fast-MoCo with keys of the engine's EMA model on the second view, a FIFO key queue (a
  persistent buffer, so it is checkpointed) and distance-weighted negative logits;
* ``decorrelation``: ``−Σ_dir ρ_dir·C_dir`` with gradient-reversal and one MLP regressor per direction.

The factory builds both Margin losses (loss ``margin``) and the shared miner's distance weighting (miner
``distance_weighted``) through the run's registry. Each term comes back already multiplied by its α, so the
engine logs ``diva/<term>`` and sums them.
Imported only by the DiVA factory (torch at module level).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from dmlplug.errors import RunError
from dmlplug_builtins.diva import BETA_GROUP, REGRESSORS_GROUP
from dmlplug_builtins.diva.terms import IntraClassMiner, decorrelation, momentum_contrast_loss

WHERE = "regularizers: diva"


class DivaRegularizer(nn.Module):
    """DiVA's auxiliary objectives for one multi-head model.

    Args:
        heads: Role → head name, for the roles ``discriminative``, ``shared``, ``selfsimilarity``, ``intra``.
        dims: Role → embedding dimension of that head.
        shared_loss: Margin loss of the shared term (``loss(embeddings, labels, triplets)``, with a ``beta``
            parameter or buffer indexed by the anchor's true label).
        intra_loss: Margin loss of the intra-class term (a second instance, with its own ``beta``).
        shared_miner: Miner of the shared term (:class:`~dmlplug_builtins.diva.terms.LabelPermutingMiner`).
        batch_size: The training batch size; every batch must have exactly this many samples (``None``:
            unchecked, for use outside a run).
        alpha_shared: Weight of the shared term.
        alpha_intra: Weight of the intra-class term.
        alpha_ssl: Weight of the self-supervised term.
        rho: Decorrelation weight per source role (each source → discriminative).
        temperature: MoCo temperature τ.
        n_key_batches: Queue length in batches (queue size ``n_key_batches · batch_size``).
        momentum: EMA momentum of the key model (read by the engine as ``ema_momentum``).
        negative_normalization: ``"column"`` (reference) or ``"row"`` (``--diva_fixed``).
        lower_cutoff: Lower distance cut-off of the negative weighting.
        upper_cutoff: Upper distance cut-off of the negative weighting.
        shuffle_keys: Shuffle the batch before the key forward pass and undo it after (shuffle-BN).
        regressor_hidden: Hidden width of the decorrelation regressors.
        beta_lr_mult: Learning-rate multiplier of the β group (``diva_beta``).
        regressor_lr_mult: Learning-rate multiplier of the regressor group (``diva_regressors``).
    """

    # The buffers registered in __init__ (nn.Module's __getattr__ types attributes as Tensor | Module).
    queue: torch.Tensor
    queue_filled: torch.Tensor

    def __init__(
        self,
        heads: dict[str, str],
        dims: dict[str, int],
        *,
        shared_loss: nn.Module,
        intra_loss: nn.Module,
        shared_miner: nn.Module,
        batch_size: int | None = None,
        alpha_shared: float = 0.3,
        alpha_intra: float = 0.3,
        alpha_ssl: float = 0.3,
        rho: dict[str, float] | None = None,
        temperature: float = 0.01,
        n_key_batches: int = 30,
        momentum: float = 0.9,
        negative_normalization: Literal["column", "row"] = "column",
        lower_cutoff: float = 0.5,
        upper_cutoff: float = 1.4,
        shuffle_keys: bool = True,
        regressor_hidden: int = 512,
        beta_lr_mult: float = 50.0,
        regressor_lr_mult: float = 1.0,
    ):
        super().__init__()
        self.heads = dict(heads)
        self.batch_size = batch_size
        self.alpha_shared, self.alpha_intra, self.alpha_ssl = alpha_shared, alpha_intra, alpha_ssl
        self.rho = dict(rho if rho is not None else {"selfsimilarity": 1500.0, "shared": 1500.0, "intra": 1500.0})
        self.temperature = temperature
        self.ema_momentum = momentum
        self.negative_normalization = negative_normalization
        self.lower_cutoff, self.upper_cutoff = lower_cutoff, upper_cutoff
        self.shuffle_keys = shuffle_keys
        self.beta_lr_mult, self.regressor_lr_mult = beta_lr_mult, regressor_lr_mult
        self.shared_loss = shared_loss
        self.intra_loss = intra_loss
        self.shared_miner = shared_miner
        self.intra_miner = IntraClassMiner()
        target_dim = dims["discriminative"]
        self.regressors = nn.ModuleDict({
            source: nn.Sequential(nn.Linear(dims[source], regressor_hidden), nn.ReLU(),
                                  nn.Linear(regressor_hidden, target_dim))
            for source in self.rho
        })
        queue_size = n_key_batches * (batch_size or 1)
        self.register_buffer("queue", torch.zeros(queue_size, dims["selfsimilarity"]))
        self.register_buffer("queue_filled", torch.zeros((), dtype=torch.long))
        self._pending_keys: torch.Tensor | None = None

    # ------------------------------------------------------------------------------------------
    def forward(self, step: Any) -> dict[str, torch.Tensor]:
        """The weighted auxiliary terms of one step: ``shared``, ``intra``, ``selfsim``, ``decorrelation``.

        Args:
            step: A :class:`dmlplug.step.StepOutput` with ``named_embeddings`` of all four roles,
                and (for the self-supervised term) ``views[0]`` and ``ema_model``.

        Raises:
            RunError: A named embedding, the second view or the EMA model is missing, or the batch is not full.
        """
        # Keys of a step whose after_optimizer_step was not called go in now: nothing reads the queue
        # between the two points, so the order of updates is the same.
        self.enqueue_pending()
        embeddings = self._named(step)
        labels = step.labels.to(embeddings["discriminative"].device)
        if self.batch_size is not None and len(labels) != self.batch_size:
            raise RunError(
                f"DiVA needs full batches of {self.batch_size} samples, got one of {len(labels)} "
                f"at step {getattr(step, 'step', '?')}",
                where=WHERE,
                fix="use a sampler that yields only full batches (every built-in sampler does)",
            )
        terms: dict[str, torch.Tensor] = {}
        if self.alpha_shared:
            shared = embeddings["shared"]
            terms["shared"] = self.alpha_shared * self.shared_loss(shared, labels, self.shared_miner(shared, labels))
        if self.alpha_intra:
            intra = embeddings["intra"]
            terms["intra"] = self.alpha_intra * self.intra_loss(intra, labels, self.intra_miner(intra, labels))
        if self.alpha_ssl:
            queries = embeddings["selfsimilarity"]
            keys = self.compute_keys(step)
            terms["selfsim"] = self.alpha_ssl * momentum_contrast_loss(
                queries, keys, self.valid_queue(), self.temperature, lower_cutoff=self.lower_cutoff,
                upper_cutoff=self.upper_cutoff, normalize=self.negative_normalization,
            )
            self._pending_keys = keys.detach().float()
        if self.rho:
            target = embeddings["discriminative"]
            total = sum(-weight * decorrelation(embeddings[source], target, self.regressors[source])
                        for source, weight in self.rho.items())
            assert isinstance(total, torch.Tensor)  # rho is not empty: no sum of nothing (0)
            terms["decorrelation"] = total
        return terms

    def after_optimizer_step(self, step: Any = None) -> None:
        """Enqueue the current step's keys (called by the engine after the optimizer step)."""
        self.enqueue_pending()

    # ------------------------------------------------------------------------------------------
    def valid_queue(self) -> torch.Tensor:
        """The filled rows of the queue (oldest first)."""
        filled = int(self.queue_filled)
        return self.queue[len(self.queue) - filled:]

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        """FIFO update: drop the oldest ``len(keys)`` rows and append ``keys`` at the end."""
        size = len(self.queue)
        keys = keys.detach().to(self.queue.device, self.queue.dtype)
        self.queue.copy_(torch.cat([self.queue, keys])[-size:])
        self.queue_filled.fill_(min(size, int(self.queue_filled) + len(keys)))

    def enqueue_pending(self) -> None:
        """Enqueue the keys of the last forward pass, if any."""
        if self._pending_keys is not None:
            keys, self._pending_keys = self._pending_keys, None
            self.enqueue(keys)

    @torch.no_grad()
    def compute_keys(self, step: Any) -> torch.Tensor:
        """Self-similarity embeddings of the EMA model on the second view (``B×D``, no gradient)."""
        views, ema = getattr(step, "views", None), getattr(step, "ema_model", None)
        if not views or ema is None:
            missing = "the second augmented view" if not views else "the EMA model"
            raise RunError(
                f"DiVA's self-supervised term needs {missing}, but the engine did not provide it",
                where=WHERE,
                fix="run DiVA through the engine (it declares requires views:2 and ema), or set alpha_ssl = 0",
            )
        view = views[0]
        count = len(view)
        if self.shuffle_keys:
            order = torch.randperm(count, device=view.device)
            inverse = torch.empty_like(order)
            inverse[order] = torch.arange(count, device=view.device)
            view = view[order]
        out = ema(view)
        named = getattr(out, "named", out)
        if not isinstance(named, dict) or self.heads["selfsimilarity"] not in named:
            raise RunError("the EMA model gave no self-similarity embedding", where=WHERE,
                           fix="use the multi head with a head named like selfsimilarity_head")
        keys = torch.nn.functional.normalize(named[self.heads["selfsimilarity"]].float(), dim=-1)
        return keys[inverse] if self.shuffle_keys else keys

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """``diva_beta`` (shared and intra β, no weight decay) and ``diva_regressors`` (no weight decay)."""
        groups = []
        betas = [loss.beta for loss in (self.shared_loss, self.intra_loss) if isinstance(loss.beta, nn.Parameter)]
        if betas:
            groups.append({"name": BETA_GROUP, "params": betas, "lr_mult": self.beta_lr_mult, "weight_decay": 0.0})
        regressors = list(self.regressors.parameters())
        if regressors:
            groups.append({"name": REGRESSORS_GROUP, "params": regressors, "lr_mult": self.regressor_lr_mult,
                           "weight_decay": 0.0})
        return groups

    def _named(self, step: Any) -> dict[str, torch.Tensor]:
        named = getattr(step, "named_embeddings", None) or {}
        out = {}
        for role, name in self.heads.items():
            if name not in named:
                raise RunError(
                    f"DiVA needs the named embedding {name!r} ({role}), the step has "
                    f"{sorted(named) or 'none'}",
                    where=WHERE,
                    fix="use [head] name = 'multi' with heads discriminative, shared, selfsimilarity and intra",
                )
            out[role] = named[name].float()  # fp32 whatever the autocast state (regressors are fp32)
        return out
