"""Contract checks of distances and reducers (the nested tables of losses and miners)."""

from __future__ import annotations

from typing import Any

from dmlplug.plugins import PluginHost
from dmlplug.testing.fixtures import BATCH, build, expect, load_host, make_context, random_embeddings


def check_distance(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A distance gives a finite ``Q×R`` matrix with each point nearest to itself.

    "Nearest" follows ``is_inverted``: a similarity is largest on the diagonal, a distance smallest. The
    distance must also work inside a PML loss (it is a ``BaseDistance``): ``ContrastiveLoss(distance=...)``
    gives a finite value with a gradient.
    """
    import torch
    from pytorch_metric_learning.losses import ContrastiveLoss

    from dmlplug.testing.fixtures import batch_labels

    host = host or load_host()
    torch.manual_seed(0)
    distance = build("distances", name, make_context(host), **(params or {}))
    raw, embeddings = random_embeddings()
    matrix = distance(embeddings.detach())
    expect(tuple(matrix.shape) == (BATCH, BATCH) and bool(torch.isfinite(matrix).all()),
           f"distance {name!r}: expected a finite {BATCH}×{BATCH} matrix, got {tuple(matrix.shape)}")
    own = matrix.diagonal()
    best = matrix.max(dim=1).values if distance.is_inverted else matrix.min(dim=1).values
    expect(bool(torch.allclose(own, best, atol=1e-5)),
           f"distance {name!r}: a point is not {'most similar' if distance.is_inverted else 'nearest'} to itself "
           f"(is_inverted = {distance.is_inverted})")
    other = distance(embeddings.detach(), embeddings.detach()[:5])
    expect(tuple(other.shape) == (BATCH, 5), f"distance {name!r}: query×reference gives {tuple(other.shape)}")
    value = ContrastiveLoss(distance=distance)(embeddings, batch_labels())
    value.backward()
    expect(bool(torch.isfinite(value)) and raw.grad is not None and bool(torch.isfinite(raw.grad).all()),
           f"distance {name!r}: a PML loss using it gives no finite value and gradient")


def check_reducer(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A reducer turns per-element losses (PML's ``loss_dict``) into a finite result with a gradient.

    The result is a finite tensor (a scalar for every reducer a loss ends with), or the ``loss_dict`` itself
    for a pass-through reducer that leaves the reduction to another.
    """
    import torch

    from dmlplug.testing.fixtures import batch_labels

    host = host or load_host()
    torch.manual_seed(0)
    reducer = build("reducers", name, make_context(host), **(params or {}))
    _, embeddings = random_embeddings()
    losses = torch.rand(BATCH, requires_grad=True)
    loss_dict = {"loss": {"losses": losses, "indices": torch.arange(BATCH), "reduction_type": "element",
                          "divisor": BATCH}}
    value = reducer(loss_dict, embeddings, batch_labels())
    if value is loss_dict:
        return
    expect(isinstance(value, torch.Tensor) and bool(torch.isfinite(value).all()),
           f"reducer {name!r}: expected a finite tensor, got {value!r}")
    value.sum().backward()
    expect(losses.grad is not None and bool(torch.isfinite(losses.grad).all()), f"reducer {name!r}: no gradient")
