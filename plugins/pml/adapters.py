"""Wrappers that fit PML losses with another calling convention to ``loss(embeddings, labels, indices_tuple)``.

Imported only by the factories of :mod:`dmlplug_builtins.pml` (it imports torch at module level).
"""

from __future__ import annotations

import torch

from dmlplug.errors import ComponentError
from dmlplug.proxies import class_proxies


class LabelsAsMetaClasses(torch.nn.Module):
    """Runs PML's ManifoldLoss with the class labels as its proxy meta-classes.

    ManifoldLoss is unsupervised in PML (random meta-classes, or meta-classes passed in place of
    ``indices_tuple``); with one proxy per training class the labels are exactly such an assignment.
    Mined tuples cannot be used.
    """

    def __init__(self, loss: torch.nn.Module):
        super().__init__()
        self.loss = loss
        self.num_classes = loss.K

    @property
    def proxies(self) -> torch.Tensor:
        """The ``C×D`` class proxies (read by :func:`dmlplug.proxies.class_proxies`)."""
        proxies = self.loss.proxies
        assert isinstance(proxies, torch.Tensor)  # PML's proxy losses hold them as an nn.Parameter
        return proxies

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, indices_tuple: tuple | None = None):
        """Manifold loss of the batch; the labels select each sample's proxy."""
        if indices_tuple is not None:
            raise ValueError("the manifold loss cannot use mined tuples: remove the miner from the recipe")
        return self.loss(embeddings, indices_tuple=labels.to(embeddings.device))


def class_pairs(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pair up samples of the same class in batch order: (1st, 2nd), (3rd, 4th) … of every class.

    Returns:
        ``(first, second)`` index tensors; a class's odd sample out is left unpaired.
    """
    first, second = [], []
    for label in torch.unique(labels):
        members = torch.nonzero(labels == label).squeeze(1)
        usable = len(members) - len(members) % 2
        first.append(members[0:usable:2])
        second.append(members[1:usable:2])
    if not first:
        empty = torch.empty(0, dtype=torch.long, device=labels.device)
        return empty, empty
    return torch.cat(first), torch.cat(second)


class ClassPairsAsViews(torch.nn.Module):
    """Runs a two-view (self-supervised) PML loss on pairs of same-class samples.

    The batch has no second augmented view in the ``loss(embeddings, labels)`` convention, so two samples
    of one class play the two views: pairs are formed by :func:`class_pairs` (an ``m_per_class`` sampler
    with ``m = 2`` gives one pair per class). Fewer than two pairs gives a zero loss.
    """

    def __init__(self, loss: torch.nn.Module):
        super().__init__()
        self.loss = loss

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, indices_tuple: tuple | None = None):
        """The wrapped loss with ``embeddings[first]`` as views and ``embeddings[second]`` as references."""
        if indices_tuple is not None:
            raise ValueError("this two-view loss cannot use mined tuples: remove the miner from the recipe")
        first, second = class_pairs(labels.to(embeddings.device))
        if len(first) < 2:
            return embeddings.sum() * 0.0
        return self.loss(embeddings[first], ref_emb=embeddings[second])


class StepRegularizer(torch.nn.Module):
    """A PML regularizer as a dmlplug regularizer: ``forward(step)`` regularises one tensor of the step.

    Args:
        regularizer: The PML regularizer (called on an ``N×D`` tensor, one row per item).
        target: ``"embeddings"`` (the batch embeddings), ``"proxies"`` (the loss's ``C×D`` class proxies)
            or ``"centers"`` (all ``C·k×D`` centres of a sub-centre loss, centres of a class contiguous).
        loss: The loss built for the run, used when the step does not carry one.
        who: Component name for error messages.
    """

    def __init__(self, regularizer: torch.nn.Module, target: str, loss: torch.nn.Module | None, who: str):
        super().__init__()
        self.regularizer = regularizer
        self.target = target
        self.who = who
        # Kept outside the module tree: the loss's parameters belong to the loss's optimizer group.
        self._loss = (loss,)

    @staticmethod
    def rows(loss: torch.nn.Module, target: str, who: str) -> torch.Tensor:
        """The rows ``target`` names in ``loss`` (proxies or sub-centres)."""
        if target == "proxies":
            try:
                return class_proxies(loss)
            except TypeError:
                raise ComponentError(f"{who} regularises class proxies, but {type(loss).__name__} has none",
                                     fix='use a proxy loss (proxy_anchor, arcface ...) or target = "embeddings"'
                                     ) from None
        weight = getattr(loss, "fc", None)
        if weight is None:
            weight = getattr(loss, "W", None)
        if weight is None or not (getattr(loss, "centers_per_class", 0) or getattr(loss, "sub_centers", 0)):
            raise ComponentError(f"{who} regularises the centres of a sub-centre loss, "
                                 f"but {type(loss).__name__} has none",
                                 fix="use it with soft_triple or sub_center_arcface")
        return weight.t()

    def forward(self, step) -> torch.Tensor:
        """The regulariser's value on the step's embeddings or on the loss's proxies / centres."""
        if self.target == "embeddings":
            return self.regularizer(step.embeddings)
        loss = step.loss_module if step.loss_module is not None else self._loss[0]
        assert loss is not None  # the factory refused a proxy target without a loss
        return self.regularizer(self.rows(loss, self.target, self.who))
