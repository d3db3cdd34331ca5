import itertools

import numpy as np
import pytest
from eval_helpers import clustered
from scipy.special import erf
from scipy.stats import norm

from dmlplug.evaluation import EvalContext, run_evaluators
from dmlplug.evaluation.opis import eps_opis_value, opis_value, utility, utility_curves
from dmlplug.evaluation.pairs import PairSet
from dmlplug_builtins.evaluators.opis import OpisEvaluator

M = 20000
UNIFORM = 2.0 * (np.arange(M) + 0.5) / M  # evenly spread "uniform on [0, 2]" distances


def synthetic(kinds):
    """A PairSet from per-class (positive distances, negative distances)."""
    pos_d, pos_c, neg_d, neg_c = [], [], [], []
    for c, (pos, neg) in enumerate(kinds):
        pos_d.append(pos)
        pos_c.append(np.full(len(pos), c))
        neg_d.append(neg)
        neg_c.append(np.full(len(neg), c))
    neg_c = np.concatenate(neg_c).astype(np.int32)
    return PairSet(np.concatenate(pos_d), np.concatenate(pos_c).astype(np.int32), np.concatenate(neg_d),
                   neg_c, np.full(len(neg_c), -1, np.int32), np.arange(len(kinds)), "sampled")


PERFECT = (np.full(100, 0.1), np.full(100, 1.9))  # U = 1 on [0.8, 1.2]
RANDOM = (UNIFORM, UNIFORM)  # ψ = d/2, φ = 1 − d/2
ZERO = (np.full(100, 1.9), np.full(100, 1.9))  # ψ = 0 on the range, so U = 0


def test_gaussian_utility_oracle_methods_4_5():
    def rates(d):
        e_p = erf((d - 0.6) / (np.sqrt(2) * 0.15))
        e_n = erf((d - 1.3) / (np.sqrt(2) * 0.1))
        return (1 - e_n) / 2, (1 + e_p) / 2

    assert utility(*rates(0.9)) == pytest.approx(0.98848, abs=1e-5)
    assert utility(*rates(1.2)) == pytest.approx(0.91382, abs=1e-5)
    assert utility(*rates(1.2), kind="pr") == pytest.approx(0.92649, abs=1e-5)
    assert utility(*rates(0.6)) == pytest.approx(0.66667, abs=1e-5)


def test_gaussian_pairs_give_the_oracle_through_the_curves():
    q = (np.arange(M) + 0.5) / M
    pairs = synthetic([(norm.ppf(q, 0.6, 0.15), norm.ppf(q, 1.3, 0.1))])
    curves = utility_curves(pairs, grid_size=20, distance_range=(0.6, 1.2))
    u = curves.utility[0]
    assert u[9] == pytest.approx(0.98848, abs=2e-4)  # d = 0.9
    assert u[19] == pytest.approx(0.91382, abs=2e-4)  # d = 1.2
    pr = utility_curves(pairs, grid_size=20, distance_range=(0.6, 1.2), kind="pr").utility[0]
    assert pr[19] == pytest.approx(0.92649, abs=2e-4)


def test_realistic_configuration_oracle_methods_4_6():
    # α = 10 % perfect classes, the rest random; eq. 2 with the N = 10 grid gives 0.023120
    pairs = synthetic([PERFECT] + [RANDOM] * 9)
    curves = utility_curves(pairs, grid_size=10, distance_range=(0.8, 1.2))
    assert opis_value(curves) == pytest.approx(0.023120, abs=2e-5)


@pytest.mark.parametrize("alpha_classes", [1, 3, 5])
def test_binary_configuration_gives_alpha_one_minus_alpha(alpha_classes):
    pairs = synthetic([PERFECT] * alpha_classes + [ZERO] * (10 - alpha_classes))
    curves = utility_curves(pairs, grid_size=10, distance_range=(0.8, 1.2))
    alpha = alpha_classes / 10
    assert opis_value(curves) == pytest.approx(alpha * (1 - alpha), abs=1e-12)
    assert eps_opis_value(curves, 0.1) == pytest.approx(1.0)
    assert eps_opis_value(curves, 1.0) == pytest.approx(0.0)  # both groups are all classes


def test_identical_classes_have_zero_opis():
    curves = utility_curves(synthetic([RANDOM] * 4), grid_size=10, distance_range=(0.8, 1.2))
    assert opis_value(curves) == pytest.approx(0.0, abs=1e-15)
    assert eps_opis_value(curves, 0.25) == pytest.approx(0.0, abs=1e-15)


def brute_opis(x, y, grid_size, far_range):
    n = len(y)
    dist = {}
    for i, j in itertools.combinations(range(n), 2):
        dist[i, j] = float(np.sqrt(((x[i].astype(np.float64) - x[j]) ** 2).sum()))
    negatives = [d for (i, j), d in dist.items() if y[i] != y[j]]
    lo, hi = np.quantile(negatives, far_range)
    grid = [lo + (hi - lo) * t / grid_size for t in range(1, grid_size + 1)]
    utilities = []
    for c in np.unique(y):
        pos = [d for (i, j), d in dist.items() if y[i] == c and y[j] == c]
        neg = [d for (i, j), d in dist.items() if (y[i] == c) != (y[j] == c)]
        if not pos or not neg:
            continue
        row = []
        for t in grid:
            psi = sum(d <= t for d in pos) / len(pos)
            phi = sum(d > t for d in neg) / len(neg)
            row.append(2 * phi * psi / (phi + psi) if phi + psi else 0.0)
        utilities.append(row)
    u = np.array(utilities)
    return float(np.mean(((u - u.mean(0)) ** 2).mean(0))), u


def test_opis_on_embeddings_equals_brute_force(tmp_path):
    x, y = clustered(6, (1, 9), 8, 0.9, seed=4, label_offset=2**35)
    ctx = EvalContext(x, y)
    ev = OpisEvaluator(["opis"], {"mode": "all"}, grid_size=15, far_range=(0.05, 0.5), distance_range=None)
    got = run_evaluators([ev], ctx)["opis"]
    want, u = brute_opis(x, y, 15, (0.05, 0.5))
    assert got == pytest.approx(want, abs=1e-6)
    assert got > 0
    files = {f.name: f for f in ev.write_artifacts(ctx, tmp_path)}
    assert set(files) == {"opis_per_class.csv", "opis_curves.json", "opis.png"}
    assert len(files["opis_per_class.csv"].read_text().strip().splitlines()) == 1 + len(u)


def test_eps_opis_pools_best_and_worst_groups():
    # ranks by mean utility: ZERO < RANDOM < PERFECT; ε = 1/3 of 3 classes → one class per group
    curves = utility_curves(synthetic([RANDOM, PERFECT, ZERO]), grid_size=10, distance_range=(0.8, 1.2))
    assert eps_opis_value(curves, 1 / 3) == pytest.approx(1.0)
    # ε = 2/3: worst = {ZERO, RANDOM}, best = {RANDOM, PERFECT}; pooled by averaging φ and ψ
    d = 0.8 + 0.04 * np.arange(1, 11)
    psi_w, phi_w = (0 + d / 2) / 2, (1 + 1 - d / 2) / 2
    psi_b, phi_b = (d / 2 + 1) / 2, (1 - d / 2 + 1) / 2
    want = np.mean((utility(phi_w, psi_w) - utility(phi_b, psi_b)) ** 2)
    assert eps_opis_value(curves, 2 / 3) == pytest.approx(want, abs=1e-3)


def test_sampled_mode_is_seeded_and_close_to_all_pairs():
    x, y = clustered(40, (4, 8), 8, 0.9, seed=7)
    options = {"grid_size": 20, "far_range": (0.01, 0.1), "distance_range": None}
    full = OpisEvaluator(["opis"], {"mode": "all"}, **options).evaluate(EvalContext(x, y))["opis"]
    s1 = OpisEvaluator(["opis"], {"mode": "sampled"}, **options).evaluate(EvalContext(x, y, seed=1))["opis"]
    s1b = OpisEvaluator(["opis"], {"mode": "sampled"}, **options).evaluate(EvalContext(x, y, seed=1))["opis"]
    assert s1 == s1b
    assert s1 == pytest.approx(full, rel=0.5)
