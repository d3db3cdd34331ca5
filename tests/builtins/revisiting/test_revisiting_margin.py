"""Margin loss with learnable β (docs/methods/revisiting.md): a hand-computed value, PML parity and R-Margin."""

from __future__ import annotations

import math

import pytest
import torch

from dmlplug.testing import batch_labels, build, make_context

# Four unit vectors: class 0 at (1, 0) and (0, 1), class 1 at (-1, 0) and (0, -1).
POINTS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
LABELS = torch.tensor([0, 0, 1, 1])
TRIPLETS = (torch.tensor([0, 0]), torch.tensor([1, 1]), torch.tensor([2, 3]))


def _direct(**params):
    """The registered 'margin' loss for the two classes of POINTS."""
    return build("losses", "margin", make_context(num_classes=2), **params)


def test_margin_loss_value_by_hand():
    # β = 1.4, α = 0.2; d_ap = √2 for both triplets, d_an = 2 and √2 (each with +1e-8 under the root).
    # ℓ⁺ = √2 − 1.4 + 0.2 = 0.2142136 twice; ℓ⁻ = max(0, −0.4) = 0 and 1.4 − √2 + 0.2 = 0.1857864.
    loss = _direct(beta=1.4)
    value = loss(POINTS, LABELS, TRIPLETS)
    root2 = math.sqrt(2 + 1e-8)
    positive_terms = [root2 - 1.2, root2 - 1.2, 1.6 - root2]
    assert value.item() == pytest.approx(sum(positive_terms) / 3, abs=1e-6)
    assert value.item() == pytest.approx(0.204738, abs=1e-6)
    value.backward()
    # dL/dβ_0 = (−1 − 1 + 1) / 3; class 1 is never an anchor.
    assert loss.beta.grad.tolist() == pytest.approx([-1 / 3, 0.0], abs=1e-6)


def test_reference_normalizer_counts_triplets_with_a_positive_term():
    value = _direct(beta=1.4, normalizer="triplets")(POINTS, LABELS, TRIPLETS)
    assert value.item() == pytest.approx(0.614214 / 2, abs=1e-6)


def test_no_positive_term_gives_zero_and_nu_adds_the_beta_sum():
    # β = 1.5, α = 0: d_ap = √2 < β and d_an = 2 > β, so both hinge terms vanish.
    loss = _direct(beta=1.5, margin=0.0)
    far = (torch.tensor([0]), torch.tensor([1]), torch.tensor([2]))  # d_ap = √2 < 1.5, d_an = 2 > 1.5
    assert loss(POINTS, LABELS, far).item() == 0.0
    with_nu = _direct(beta=1.5, margin=0.0, nu=0.1)
    assert with_nu(POINTS, LABELS, far).item() == pytest.approx(0.15)


def test_matches_pml_margin_loss_on_mined_triplets(seeded):
    from pytorch_metric_learning.losses import MarginLoss

    embeddings = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    labels = batch_labels()
    triplets = build("miners", "distance_weighted")(embeddings, labels)
    ours = build("losses", "margin")(embeddings, labels, triplets)
    pml = MarginLoss(margin=0.2, beta=1.2, learn_beta=True, num_classes=8)(embeddings, labels, triplets)
    registered = build("losses", "pml_margin", learn_beta=True, per_class_beta=True)(embeddings, labels, triplets)
    assert ours.item() == pytest.approx(pml.item(), abs=1e-6)
    assert registered.item() == pytest.approx(pml.item(), abs=1e-6)


def test_r_margin_switched_triplets_have_finite_gradients(seeded):
    raw = torch.randn(32, 16, requires_grad=True)
    embeddings = torch.nn.functional.normalize(raw, dim=1)
    labels = batch_labels()
    triplets = build("miners", "rho_distance", p_switch=1.0)(embeddings, labels)
    assert (triplets[0] == triplets[1]).all()
    loss = build("losses", "margin")
    value = loss(embeddings, labels, triplets)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(raw.grad).all() and torch.isfinite(loss.beta.grad).all()


def test_beta_has_its_own_group_without_weight_decay():
    loss = _direct()
    (group,) = loss.optimizer_param_groups()
    assert group["name"] == "beta" and group["weight_decay"] == 0.0 and group["params"][0] is loss.beta
    assert _direct(learn_beta=False).optimizer_param_groups() == []
    assert list(_direct(learn_beta=False).parameters()) == []
    assert _direct(per_class_beta=False).beta.shape == (1,)


def test_batch_without_triplets_is_zero_and_differentiable():
    raw = torch.randn(4, 2, requires_grad=True)
    # All four samples share class 0: no negative, so no triplet.
    value = _direct()(raw, torch.zeros(4, dtype=torch.long))
    assert value.item() == 0.0
    value.backward()
    assert raw.grad is not None
