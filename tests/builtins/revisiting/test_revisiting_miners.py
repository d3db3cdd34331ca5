"""Revisiting-DML miners (docs/methods/revisiting.md) against brute-force definitions and hand-built batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dmlplug.testing import batch_labels, build


def _line(xs) -> torch.Tensor:
    """Points on a line (as 2-d embeddings), so every distance is |x_i − x_j|."""
    return torch.tensor([[float(x), 0.0] for x in xs])


def _brute_force_negative_probabilities(x: np.ndarray, labels: np.ndarray, anchor: int, cutoff=0.5) -> np.ndarray:
    """The distance weighting of docs/methods/revisiting.md written out for one anchor with plain numpy loops."""
    dim = x.shape[1]
    log_w = np.full(len(x), -np.inf)
    for n in range(len(x)):
        if labels[n] == labels[anchor]:
            continue
        d = math.sqrt(max(float(np.sum((x[anchor] - x[n]) ** 2)), 0.0))
        d = min(max(d, cutoff), 2 - 1e-6)
        log_w[n] = (2 - dim) * math.log(d) - (dim - 3) / 2 * math.log(1 - d * d / 4)
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


@pytest.fixture
def cloud():
    g = torch.Generator().manual_seed(3)
    x = torch.nn.functional.normalize(torch.randn(12, 5, generator=g), dim=1)
    x[5] = torch.nn.functional.normalize(x[0] + 0.05 * torch.randn(5, generator=g), dim=0)  # a close negative
    labels = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4])
    return x, labels


def test_distance_weighted_probabilities_match_the_definition(cloud):
    x, labels = cloud
    miner = build("miners", "distance_weighted")
    probabilities = miner.negative_probabilities(x, labels).numpy()
    for anchor in range(len(x)):
        expected = _brute_force_negative_probabilities(x.numpy().astype(np.float64), labels.numpy(), anchor)
        np.testing.assert_allclose(probabilities[anchor], expected, atol=1e-5)


def test_distance_weighted_draws_follow_the_weights(cloud):
    x, labels = cloud
    miner = build("miners", "distance_weighted")
    expected = miner.negative_probabilities(x, labels)[0].numpy()
    torch.manual_seed(0)
    counts = np.zeros(len(x))
    for _ in range(3000):
        anchors, _, negatives = miner(x, labels)
        counts[int(negatives[anchors == 0])] += 1
    assert np.abs(counts / counts.sum() - expected).max() < 0.03


def test_distance_weighted_positives_are_uniform_and_lone_anchors_use_themselves():
    x = torch.nn.functional.normalize(torch.randn(7, 4, generator=torch.Generator().manual_seed(1)), dim=1)
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2])  # sample 6 is alone in its class
    miner = build("miners", "distance_weighted")
    torch.manual_seed(0)
    partner_counts = np.zeros(7)
    for _ in range(1500):
        anchors, positives, negatives = miner(x, labels)
        assert anchors.tolist() == list(range(7))  # every batch element is an anchor (B triplets)
        assert int(positives[6]) == 6
        assert (labels[negatives] != labels[anchors]).all()
        partner_counts[int(positives[0])] += 1
    assert partner_counts[0] == 0 and abs(partner_counts[1] / 1500 - 0.5) < 0.05
    only_with_partner = build("miners", "distance_weighted", anchors="with_positive")
    assert 6 not in only_with_partner(x, labels)[0].tolist()


def test_distance_weighted_upper_cutoff_excludes_far_negatives():
    x = _line([0.0, 0.1, 0.6, 1.2, 1.9]) / 1.0
    labels = torch.tensor([0, 0, 1, 2, 3])
    probabilities = build("miners", "distance_weighted", upper_cutoff=1.4).negative_probabilities(x, labels)
    assert probabilities[0, 4] == 0 and probabilities[0, 2] > 0 and probabilities[0, 3] > 0
    assert build("miners", "distance_weighted").negative_probabilities(x, labels)[0, 4] > 0


def test_rho_distance_without_switch_is_distance_weighted(cloud):
    x, labels = cloud
    torch.manual_seed(5)
    plain = build("miners", "distance_weighted")(x, labels)
    torch.manual_seed(5)
    rho = build("miners", "rho_distance", p_switch=0.0)(x, labels)
    for a, b in zip(plain, rho, strict=True):
        assert torch.equal(a, b)


def test_rho_distance_switch_puts_a_same_class_sample_in_the_negative_slot(cloud):
    x, labels = cloud
    anchors, positives, negatives = build("miners", "rho_distance", p_switch=1.0)(x, labels)
    assert (positives == anchors).all()
    assert (labels[negatives] == labels[anchors]).all() and (negatives != anchors).all()


def test_rho_distance_switches_with_probability_p(seeded):
    embeddings = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    miner = build("miners", "rho_distance", p_switch=0.4)
    switched = total = 0
    for _ in range(200):
        anchors, positives, _ = miner(embeddings, batch_labels())
        switched += int((positives == anchors).sum())
        total += len(anchors)
    assert abs(switched / total - 0.4) < 0.03


def test_semihard_takes_negatives_from_the_band():
    # Anchor 0 at 0, its only positive at 0.5; negatives at 0.3 (hard), 0.6, 0.65 (semi-hard), 1.0 (easy).
    x = _line([0.0, 0.5, 0.3, 0.6, 0.65, 1.0])
    labels = torch.tensor([0, 0, 1, 2, 3, 4])
    miner = build("miners", "semihard", margin=0.2)
    torch.manual_seed(0)
    seen = set()
    for _ in range(200):
        anchors, positives, negatives = miner(x, labels)
        assert anchors.tolist() == [0, 1]  # only samples with a positive are anchors
        assert int(positives[0]) == 1
        seen.add(int(negatives[0]))
    assert seen == {3, 4}


def test_semihard_falls_back_to_any_negative_when_the_band_is_empty():
    x = _line([0.0, 0.5, 0.3, 0.6, 0.65, 1.0])
    labels = torch.tensor([0, 0, 1, 2, 3, 4])
    miner = build("miners", "semihard", margin=0.01)  # band (0.5, 0.51) holds no negative
    torch.manual_seed(0)
    seen = {int(miner(x, labels)[2][0]) for _ in range(300)}
    assert seen == {2, 3, 4, 5}


def test_softhard_picks_hard_positives_and_negatives():
    # Anchor 0: positives at 0.2 and 0.9, negatives at 0.5 and 1.5.
    # Hard negatives: closer than the farthest positive (0.9) -> {0.5}; hard positives: farther than the
    # closest negative (0.5) -> {0.9}.
    x = _line([0.0, 0.2, 0.9, 0.5, 1.5])
    labels = torch.tensor([0, 0, 0, 1, 2])
    miner = build("miners", "softhard")
    torch.manual_seed(0)
    for _ in range(50):
        anchors, positives, negatives = miner(x, labels)
        assert int(positives[0]) == 2 and int(negatives[0]) == 3


def test_softhard_falls_back_to_uniform_sets():
    # Positives all closer than all negatives: both hard sets are empty for anchor 0.
    x = _line([0.0, 0.1, 0.15, 0.5, 0.6])
    labels = torch.tensor([0, 0, 0, 1, 2])
    miner = build("miners", "softhard")
    torch.manual_seed(0)
    draws = [miner(x, labels) for _ in range(200)]
    assert {int(d[1][0]) for d in draws} == {1, 2}
    assert {int(d[2][0]) for d in draws} == {3, 4}


def test_random_triplets_are_distinct_valid_samples_of_all_triplets(seeded):
    labels = batch_labels()
    x = torch.randn(32, 16)
    a, p, n = build("miners", "random_triplets")(x, labels)
    triplets = set(zip(a.tolist(), p.tolist(), n.tolist(), strict=True))
    assert len(triplets) == 32
    assert all(labels[i] == labels[j] and i != j and labels[k] != labels[i] for i, j, k in triplets)
    small = torch.tensor([0, 0, 1])  # exactly two valid triplets: (0, 1, 2) and (1, 0, 2)
    a, p, n = build("miners", "random_triplets")(torch.randn(3, 4), small)
    assert set(zip(a.tolist(), p.tolist(), n.tolist(), strict=True)) == {(0, 1, 2), (1, 0, 2)}


def test_miners_without_a_valid_triplet_return_empty_int64_triplets():
    from dmlplug_builtins.revisiting.miners import empty_triplets

    device = torch.device("cpu")
    assert [(t.dtype, len(t)) for t in empty_triplets(device)] == [(torch.long, 0)] * 3
    lone = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
    for name in ("semihard", "softhard"):
        triplets = build("miners", name)(lone, torch.arange(4))  # four classes of one sample each
        assert [(t.dtype, len(t)) for t in triplets] == [(torch.long, 0)] * 3


def test_revisiting_components_are_registered_by_their_own_plugin():
    from dmlplug.testing import load_host

    registry = load_host().registry
    for kind, name in (("losses", "margin"), ("miners", "distance_weighted"), ("miners", "rho_distance"),
                       ("miners", "semihard"), ("miners", "softhard"), ("miners", "random_triplets")):
        assert registry.get(kind, name).plugin == "revisiting", name
    assert registry.get("losses", "pml_margin").plugin == "pml"
    assert registry.get("miners", "pml_distance_weighted").plugin == "pml"
