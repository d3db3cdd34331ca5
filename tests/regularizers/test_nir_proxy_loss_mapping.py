"""NIR's ω·L_PA is the recipe's ProxyAnchor loss: PML's ProxyAnchorLoss against docs/methods/nir.md, brute force."""

import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import ProxyAnchorLoss

ALPHA, DELTA = 32.0, 0.1


def _methods_proxy_anchor(embeddings, labels, proxies):
    """docs/methods/nir.md literally: positive part averaged over the B batch columns, negative over all C proxies."""
    x, p = F.normalize(embeddings, dim=1).tolist(), F.normalize(proxies, dim=1).tolist()
    labels = labels.tolist()
    cos = lambda i, c: sum(a * b for a, b in zip(x[i], p[c], strict=True))  # noqa: E731
    positive = 0.0
    for j in range(len(labels)):
        c = labels[j]
        positive += math.log(1 + sum(math.exp(-ALPHA * (cos(i, c) - DELTA))
                                     for i in range(len(labels)) if labels[i] == c))
    negative = 0.0
    for c in range(len(p)):
        negative += math.log(1 + sum(math.exp(ALPHA * (cos(i, c) + DELTA))
                                     for i in range(len(labels)) if labels[i] != c))
    return positive / len(labels) + negative / len(p), positive, negative


def _class_averaged_positive(embeddings, labels, proxies):
    """The positive part averaged once per class present in the batch (what PML divides by)."""
    x, p = F.normalize(embeddings, dim=1), F.normalize(proxies, dim=1)
    present = labels.unique()
    terms = [torch.log1p(torch.exp(-ALPHA * (x[labels == c] @ p[c] - DELTA)).sum()) for c in present]
    return torch.stack(terms).mean().item()


def _setup(labels, seed):
    torch.manual_seed(seed)
    loss = ProxyAnchorLoss(num_classes=12, embedding_size=16, margin=DELTA, alpha=ALPHA)
    embeddings = F.normalize(torch.randn(len(labels), 16), dim=1)
    # Pull samples part-way towards their proxies so the positive part is of order one, not vanishing.
    with torch.no_grad():
        embeddings = F.normalize(embeddings + 0.5 * F.normalize(loss.proxies, dim=1)[labels], dim=1)
    return loss, embeddings


@pytest.mark.parametrize("seed", range(3))
def test_pml_equals_methods_form_on_class_balanced_batches(seed):
    labels = torch.arange(6).repeat_interleave(2)[torch.randperm(12, generator=torch.Generator().manual_seed(seed))]
    loss, embeddings = _setup(labels, seed)
    expected, _, _ = _methods_proxy_anchor(embeddings, labels, loss.proxies.detach())
    assert loss(embeddings, labels).item() == pytest.approx(expected, rel=1e-5)


def test_pml_averages_positives_per_class_when_batches_are_unbalanced():
    labels = torch.tensor([0, 0, 0, 0, 1, 2, 2, 3])
    loss, embeddings = _setup(labels, seed=5)
    proxies = loss.proxies.detach()
    methods_value, _, negative = _methods_proxy_anchor(embeddings, labels, proxies)
    pml_value = loss(embeddings, labels).item()
    # Same negative part; positive part per class present (PML) instead of per sample (reference).
    assert pml_value == pytest.approx(_class_averaged_positive(embeddings, labels, proxies) + negative / 12,
                                      rel=1e-5)
    assert abs(pml_value - methods_value) > 0.1
