import numpy as np
import pytest
from eval_helpers import clustered

from dmlplug.evaluation import EvalContext, run_evaluators
from dmlplug.evaluation.pairs import get_pairs
from dmlplug_builtins.evaluators.verification import VerificationEvaluator, equal_error_rate, roc_curve, tar_at_far


def brute_tar(pos, neg, far):
    best = 0.0
    for t in np.concatenate([pos, neg, [np.inf]]):
        for accept in (lambda d, t=t: d < t, lambda d, t=t: d <= t):
            if accept(neg).mean() <= far + 1e-12:
                best = max(best, accept(pos).mean())
    return best


@pytest.mark.parametrize("far", [0.0, 0.01, 0.05, 0.2, 0.5])
def test_tar_at_far_is_the_best_tar_under_the_far_limit(far):
    rng = np.random.default_rng(0)
    pos = np.round(rng.normal(0.6, 0.2, 300), 2)  # rounding creates ties
    neg = np.round(rng.normal(1.2, 0.2, 400), 2)
    assert tar_at_far(pos, neg, far) == pytest.approx(brute_tar(pos, neg, far))


def test_eer_simple_cases():
    assert equal_error_rate(np.array([0.1, 0.2]), np.array([0.8, 0.9])) == 0.0
    # identical distributions: FAR = TAR along the curve, so FAR = FRR at 0.5
    same = np.linspace(0, 1, 101)
    assert equal_error_rate(same, same) == pytest.approx(0.5, abs=0.01)
    # one negative below both positives, one above: FAR = FRR = 1/2 when accepting one of each side
    assert equal_error_rate(np.array([0.2, 0.6]), np.array([0.1, 0.9])) == pytest.approx(0.5)


def test_gaussian_eer_matches_closed_form():
    from scipy.stats import norm

    m = 20000
    q = (np.arange(m) + 0.5) / m
    pos, neg = norm.ppf(q, 0.6, 0.15), norm.ppf(q, 1.3, 0.1)
    # equal-variance-free crossing: FRR = 1 − Φ((t−0.6)/0.15) = Φ((t−1.3)/0.1) = FAR
    t = 0.6 + 0.15 * (0.7 / 0.25)
    assert equal_error_rate(pos, neg) == pytest.approx(norm.cdf((t - 1.3) / 0.1), abs=2e-4)


def test_roc_curve_endpoints():
    t, far, tar = roc_curve(np.array([0.1, 0.3]), np.array([0.2, 0.4]))
    assert far[0] == tar[0] == 0 and far[-1] == tar[-1] == 1
    assert np.all(np.diff(far) >= 0) and np.all(np.diff(tar) >= 0)


def test_all_pairs_are_every_unordered_pair():
    x, y = clustered(5, (2, 6), 4, 0.5, seed=1)
    pairs = get_pairs(EvalContext(x, y), "all")
    n = len(y)
    assert len(pairs.pos_dist) + len(pairs.neg_dist) == n * (n - 1) // 2
    same = (y[:, None] == y[None, :]).sum() - n
    assert len(pairs.pos_dist) == same // 2
    d = np.sqrt(((x[:, None].astype(np.float64) - x[None]) ** 2).sum(-1))
    iu = np.triu_indices(n, 1)
    assert np.sort(np.concatenate([pairs.pos_dist, pairs.neg_dist])) == pytest.approx(np.sort(d[iu]), abs=1e-3)


def test_sampled_pairs_ratio_and_seed():
    x, y = clustered(30, (2, 6), 8, 0.5, seed=2)
    a = get_pairs(EvalContext(x, y, seed=5), "sampled", negative_ratio=10)
    b = get_pairs(EvalContext(x, y, seed=5), "sampled", negative_ratio=10)
    c = get_pairs(EvalContext(x, y, seed=6), "sampled", negative_ratio=10)
    np.testing.assert_array_equal(a.neg_dist, b.neg_dist)
    assert not np.array_equal(a.neg_dist, c.neg_dist)
    for cls in range(len(a.classes)):
        assert (a.neg_class_a == cls).sum() == 10 * (a.pos_class == cls).sum()
    # every sampled negative really joins two classes
    assert np.all(a.neg_dist > 0)


def test_verification_evaluator_and_artifacts(tmp_path):
    x, y = clustered(10, (4, 8), 8, 0.7, seed=3)
    ctx = EvalContext(x, y)
    ev = VerificationEvaluator([0.01, 0.1], {"mode": "auto"})
    m = run_evaluators([ev], ctx)
    assert set(m) == {"tar@far=0.01", "tar@far=0.1", "eer"}
    assert 0 <= m["tar@far=0.01"] <= m["tar@far=0.1"] <= 1 and 0 <= m["eer"] <= 0.5
    files = ev.write_artifacts(ctx, tmp_path)
    assert {f.name for f in files} == {"roc.csv", "roc.png"}
    assert files[0].read_text().startswith("threshold,far,tar")
