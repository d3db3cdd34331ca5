"""DiVA maths with known answers: gradient reversal, miners, negative weighting, MoCo term, decorrelation."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dmlplug
from dmlplug_builtins.diva.terms import (
    IntraClassMiner,
    LabelPermutingMiner,
    decorrelation,
    gradient_reversal,
    momentum_contrast_loss,
    negative_weights,
)


def _shared_miner():
    """DiVA's shared miner as its factory builds it: distance-weighted, anchors with a positive, no upper cut-off."""
    return LabelPermutingMiner(dmlplug.create("miner", "distance_weighted", anchors="with_positive"))


def test_gradient_reversal_is_identity_forward_and_flips_the_gradient():
    x = torch.randn(3, 4, requires_grad=True)
    c = torch.randn(3, 4)
    y = gradient_reversal(x)
    assert torch.equal(y, x)
    (y * c).sum().backward()
    assert torch.allclose(x.grad, -c)
    # Without the layer the same function has the opposite gradient.
    x2 = x.detach().clone().requires_grad_(True)
    (x2 * c).sum().backward()
    assert torch.allclose(x2.grad, -x.grad)


def test_label_permuting_miner_mines_on_the_permuted_labels():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    permutation = torch.tensor([1, 2, 0, 3, 5, 4])  # permuted labels: [0, 1, 0, 1, 2, 2]
    eye = torch.eye(128)
    # Samples 0 and 1 coincide, as do 2 and 3; 4 and 5 sit on their own axes (distance sqrt(2) to the rest).
    embeddings = torch.stack([eye[0], eye[0], eye[1], eye[1], eye[2], eye[3]])
    torch.manual_seed(0)
    for _ in range(20):
        anchors, positives, negatives = _shared_miner()(embeddings, labels, permutation)
        assert anchors.tolist() == [0, 1, 2, 3, 4, 5]
        # The only sample with the same permuted label.
        assert positives.tolist() == [2, 3, 0, 1, 5, 4]
        # The distance weighting puts all mass on the coincident sample (d = 0 -> clamped to 0.5: weight
        # e^91 times that of a sample at sqrt(2)) although it has the same TRUE label as the anchor.
        assert negatives[:4].tolist() == [1, 0, 3, 2]
        # Anchors 4 and 5 see all permuted-negatives at the same distance.
        assert set(negatives[4:].tolist()) <= {0, 1, 2, 3}


def test_label_permuting_miner_without_permutation_draws_a_random_one():
    labels = torch.arange(8).repeat_interleave(2)
    embeddings = F.normalize(torch.randn(16, 32, generator=torch.Generator().manual_seed(1)), dim=1)
    torch.manual_seed(0)
    cross_class = 0
    for _ in range(30):
        anchors, positives, negatives = _shared_miner()(embeddings, labels)
        assert len(anchors) == 16 and (anchors != positives).all()
        cross_class += int((labels[anchors] != labels[positives]).sum())
    # True-class partners would give 0; a random pairing of 16 samples is cross-class 14/15 of the time.
    assert cross_class > 0.8 * 30 * 16


def test_intra_class_miner_draws_triplets_inside_uniformly_chosen_classes():
    labels = torch.tensor([0] * 8 + [1] * 2 + [5])
    embeddings = torch.randn(len(labels), 4)
    torch.manual_seed(0)
    counts = torch.zeros(6)
    same_ap = 0
    for _ in range(300):
        a, p, n = IntraClassMiner()(embeddings, labels)
        assert len(a) == len(labels)
        assert (labels[a] == labels[p]).all() and (labels[a] == labels[n]).all()
        counts += torch.bincount(labels[a], minlength=6).float()
        same_ap += int((a == p).sum())
        lone = labels[a] == 5
        assert (a[lone] == 10).all() and (p[lone] == 10).all() and (n[lone] == 10).all()
    # Classes, not samples, are uniform: each of the 3 classes gets ~1/3 of the triplets (class 0 has 8/11 of
    # the samples).
    share = counts / counts.sum()
    assert share[[0, 1, 5]].sub(1 / 3).abs().max() < 0.03
    assert same_ap > 0  # drawn with replacement


def _reference_weights(similarities, dim, normalize, lower=0.5, upper=1.4):
    """Plain-python negative weights of docs/methods/diva.md."""
    rows, cols = len(similarities), len(similarities[0])
    d = [[math.sqrt(max(0.0, 2 - 2 * s)) for s in row] for row in similarities]
    log_w = []
    for row in d:
        out = []
        for value in row:
            c = min(max(value, lower), 2 - 1e-6)
            out.append((2 - dim) * math.log(c) - (dim - 3) / 2 * math.log(1 - c * c / 4))
        log_w.append(out)
    peaks = [max(row) for row in log_w] if normalize == "row" else [max(max(row) for row in log_w)] * rows
    w = [[max(0.0 if d[i][j] > upper else math.exp(log_w[i][j] - peaks[i]), 1e-45) for j in range(cols)]
         for i in range(rows)]
    if normalize == "row":
        return [[w[i][j] / sum(w[i]) for j in range(cols)] for i in range(rows)]
    col_sums = [sum(w[i][j] for i in range(rows)) for j in range(cols)]
    return [[w[i][j] / col_sums[j] for j in range(cols)] for i in range(rows)]


@pytest.mark.parametrize("normalize", ["column", "row"])
def test_negative_weights_match_a_hand_computation(normalize):
    # d = sqrt(2 - 2s): s = 0.95 -> 0.316 (clamped to 0.5), 0.6 -> 0.894, 0.1 -> 1.342, -0.2 -> 1.549 (> 1.4).
    sims = [[0.95, 0.6, 0.1, -0.2], [0.3, 0.1, 0.5, 0.9]]
    got = negative_weights(torch.tensor(sims), dim=8, normalize=normalize)
    expected = torch.tensor(_reference_weights(sims, 8, normalize))
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-30)
    axis = 1 if normalize == "row" else 0
    assert torch.allclose(got.sum(axis), torch.ones(got.shape[1 - axis]))
    # The key beyond the cut-off only keeps the 1e-45 floor.
    assert got[0, 3] < 1e-30


def test_negative_weights_hand_values_for_a_two_by_two_case():
    # D = 4: ln w = -2 ln d - 0.5 ln(1 - d²/4). s = 0.5 -> d = 1; s = 0 -> d = sqrt(2).
    sims = torch.tensor([[0.5, 0.0], [0.0, 0.0]])
    w1 = math.exp(-2 * math.log(1.0) - 0.5 * math.log(0.75))   # d = 1
    w2 = math.exp(-2 * math.log(math.sqrt(2)) - 0.5 * math.log(0.5))  # d = sqrt(2) > 1.4 -> floor
    assert w2 > 0
    got = negative_weights(sims, dim=4, normalize="row")
    # Row 0: w1 and the floor; row 1: two floors -> 1/2 each.
    assert got[0, 0].item() == pytest.approx(1.0) and got[0, 1].item() < 1e-30
    assert got[1].tolist() == pytest.approx([0.5, 0.5])
    got = negative_weights(sims, dim=4, normalize="column")
    assert got[:, 0].tolist() == pytest.approx([1.0, 0.0], abs=1e-30)
    assert got[:, 1].tolist() == pytest.approx([0.5, 0.5])
    assert w1 == pytest.approx(1 / math.sqrt(0.75))


def test_negative_weights_stay_finite_at_antipodal_points():
    got = negative_weights(torch.tensor([[-1.0, 0.99, 0.2]]), dim=128, normalize="row")
    assert torch.isfinite(got).all() and got.sum().item() == pytest.approx(1.0)


def test_momentum_contrast_loss_matches_a_hand_computation():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    k = torch.tensor([[0.8, 0.6], [0.6, 0.8]])
    queue = torch.tensor([[1.0, 0.0], [0.6, -0.8], [-1.0, 0.0]])
    tau = 0.5
    loss = momentum_contrast_loss(q, k, queue, tau, normalize="row")
    # Hand computation: D = 2 -> ln w = 0·ln d - (-1/2)·ln(1 - d²/4) = 0.5·ln(1 - d²/4).
    sims = [[1.0, 0.6, -1.0], [0.0, -0.8, 0.0]]
    weights = _reference_weights(sims, 2, "row")
    expected = 0.0
    for b, pos in enumerate([0.8, 0.8]):
        logits = [pos / tau] + [sims[b][j] * weights[b][j] / tau for j in range(3)]
        expected += -logits[0] + math.log(sum(math.exp(v) for v in logits))
    assert loss.item() == pytest.approx(expected / 2, rel=1e-5)
    loss.backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_momentum_contrast_loss_with_an_empty_queue_is_zero_and_keys_get_no_gradient():
    q = F.normalize(torch.randn(3, 4), dim=1).requires_grad_(True)
    k = F.normalize(torch.randn(3, 4), dim=1).requires_grad_(True)
    assert momentum_contrast_loss(q, k, torch.empty(0, 4), 0.1).item() == 0.0
    momentum_contrast_loss(q, k, F.normalize(torch.randn(5, 4), dim=1), 0.1).backward()
    assert k.grad is None and q.grad.abs().sum() > 0


def test_decorrelation_value_and_gradient_directions():
    torch.manual_seed(0)
    source = torch.randn(5, 6, requires_grad=True)
    target = torch.randn(5, 6, requires_grad=True)
    regressor = nn.Linear(6, 6)
    value = decorrelation(source, target, regressor)
    s_hat = F.normalize(source.detach(), dim=1)
    r = F.normalize(regressor(s_hat), dim=1).detach()
    t_hat = F.normalize(target.detach(), dim=1)
    expected = sum(float(t_hat[b, j] * r[b, j]) ** 2 for b in range(5) for j in range(6)) / 30
    assert value.item() == pytest.approx(expected, rel=1e-5)

    # The term added to the loss is -rho·C: the regressor descends on -C, the embeddings on +C (reversed).
    (-value).backward()
    plain_source = source.detach().clone().requires_grad_(True)
    plain_target = target.detach().clone().requires_grad_(True)
    s = F.normalize(plain_source, dim=1)
    c = (F.normalize(plain_target, dim=1) * F.normalize(regressor(s), dim=1)).pow(2).mean()
    regressor.zero_grad()
    c.backward()
    assert torch.allclose(source.grad, plain_source.grad, atol=1e-7)
    assert torch.allclose(target.grad, plain_target.grad, atol=1e-7)


def test_decorrelation_regressor_gradient_increases_correlation():
    torch.manual_seed(0)
    source, target = torch.randn(16, 8), torch.randn(16, 8)
    regressor = nn.Linear(8, 8)
    optimizer = torch.optim.SGD(regressor.parameters(), lr=0.5)
    before = decorrelation(source, target, regressor).item()
    for _ in range(50):
        optimizer.zero_grad()
        (-decorrelation(source, target, regressor)).backward()
        optimizer.step()
    assert decorrelation(source, target, regressor).item() > before
