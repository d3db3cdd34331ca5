import itertools

import numpy as np
import pytest
from eval_helpers import clustered

from dmlplug.evaluation import EvalContext, run_evaluators
from dmlplug_builtins.evaluators.structure import (
    StructureEvaluator,
    density_metrics,
    singular_values,
    spectral_decay,
    uniformity_g2,
)


def test_rho_oracle_methods_7_3():
    s = np.array([4.0, 2.0, 1.0, 1.0])
    assert spectral_decay(s, 1) == pytest.approx(0.173287, abs=1e-6)
    assert spectral_decay(s, 2) == pytest.approx(0.056633, abs=1e-6)


def test_rho_from_a_matrix_with_known_singular_values():
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.standard_normal((50, 4)))
    v, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    x = (u * np.array([4.0, 2.0, 1.0, 1.0])) @ v.T
    np.testing.assert_allclose(singular_values(x.astype(np.float32)), [4, 2, 1, 1], atol=1e-5)
    ctx = EvalContext(x.astype(np.float32), rng.integers(0, 3, 50))
    m = run_evaluators([StructureEvaluator([1, 2])], ctx)
    assert m["rho@1"] == pytest.approx(0.173287, abs=1e-5)
    assert m["rho@2"] == pytest.approx(0.056633, abs=1e-5)


def test_singular_values_are_min_n_d_many_and_match_numpy():
    x = np.random.default_rng(1).standard_normal((6, 10)).astype(np.float32)
    np.testing.assert_allclose(singular_values(x), np.linalg.svd(x.astype(np.float64), compute_uv=False),
                               rtol=1e-6)


def cosine_distance(a, b):
    return 1 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


def test_density_metrics_equal_brute_force():
    x, y = clustered(5, (1, 7), 6, 0.6, seed=2)
    x = x * np.random.default_rng(0).uniform(0.5, 2, (len(x), 1)).astype(np.float32)  # not unit length
    got = density_metrics(x, y)
    u = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    intra, centres, spread = [], [], {}
    for c in np.unique(y):
        members = u[y == c]
        centres.append(members.mean(0))
        if len(members) >= 2:
            intra.append(np.mean([cosine_distance(a, b) for a, b in itertools.permutations(members, 2)]))
            spread[c] = np.mean(np.linalg.norm(members - members.mean(0), axis=1))
    inter = np.mean([cosine_distance(a, b) for a, b in itertools.permutations(centres, 2)])
    assert got["pi_intra"] == pytest.approx(np.mean(intra), abs=1e-9)
    assert got["pi_inter"] == pytest.approx(inter, abs=1e-9)
    assert got["pi_ratio"] == pytest.approx(np.mean(intra) / inter, abs=1e-9)
    assert got["class_concentration_var"] == pytest.approx(np.var(np.array(list(spread.values())) / inter),
                                                          abs=1e-9)


def test_uniformity_g2_equals_brute_force_and_sampling_is_close():
    x, _ = clustered(4, (5, 10), 5, 1.0, seed=3)
    u = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    want = np.mean([np.exp(-2 * np.sum((a - b) ** 2)) for a, b in itertools.permutations(u, 2)])
    assert uniformity_g2(x) == pytest.approx(want, abs=1e-12)
    assert uniformity_g2(x, log=True) == pytest.approx(np.log(want), abs=1e-12)
    # one pair fewer than all pairs switches to sampling that many random pairs: close, not equal
    sampled = uniformity_g2(x, max_pairs=len(x) * (len(x) - 1) // 2 - 1, seed=0)
    assert sampled != pytest.approx(want, abs=1e-12)
    assert sampled == pytest.approx(want, rel=0.05)
