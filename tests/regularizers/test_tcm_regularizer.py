"""TCM regularizer: docs/methods/tcm.md oracle, agreement with PML and a brute-force loop, zero cases."""

import itertools

import pytest
import torch
from pytorch_metric_learning.losses import ThresholdConsistentMarginLoss

import dmlplug
from dmlplug.errors import RecipeError
from dmlplug.step import StepOutput
from dmlplug_builtins.tcm.regularizer import tcm_terms

ORACLE_EMBEDDINGS = [[0.0, 1.0], [0.43, 0.9], [1.0, 0.0], [0.5, 0.5]]
ORACLE_LABELS = [0, 0, 1, 1]


def _step(embeddings, labels):
    return StepOutput(embeddings=torch.as_tensor(embeddings, dtype=torch.float32),
                      labels=torch.as_tensor(labels, dtype=torch.int64))


def _brute_force_tcm(embeddings, labels, m_plus, m_minus, l_plus=1.0, l_minus=1.0):
    """Unordered pairs, plain Python loops: an independent reading of docs/methods/tcm.md."""
    pos, neg = [], []
    for i, j in itertools.combinations(range(len(labels)), 2):
        s = torch.nn.functional.cosine_similarity(embeddings[i], embeddings[j], dim=0).item()
        if labels[i] == labels[j] and s <= m_plus:
            pos.append(m_plus - s)
        elif labels[i] != labels[j] and s >= m_minus:
            neg.append(s - m_minus)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return l_plus * mean(pos) + l_minus * mean(neg)


def test_four_point_oracle():
    tcm = dmlplug.create("regularizer", "tcm")
    step = _step(ORACLE_EMBEDDINGS, ORACLE_LABELS)
    pos, neg = tcm_terms(step.embeddings, step.labels, 0.9, 0.5)
    assert pos.item() == pytest.approx(0.19289, abs=1e-5)
    assert neg.item() == pytest.approx(0.32498, abs=1e-5)
    assert tcm(step).item() == pytest.approx(0.51788, abs=1e-5)


def test_lambdas_weight_the_two_terms():
    tcm = dmlplug.create("regularizer", "tcm", lambda_plus=2.0, lambda_minus=0.5)
    assert tcm(_step(ORACLE_EMBEDDINGS, ORACLE_LABELS)).item() == pytest.approx(
        2.0 * 0.19289 + 0.5 * 0.32498, abs=1e-5)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("margins", [(0.9, 0.5), (0.3, 0.0), (0.6, -0.2)])
def test_matches_pml_and_brute_force(seed, margins):
    m_plus, m_minus = margins
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(6).repeat_interleave(4)[torch.randperm(24, generator=generator)]
    embeddings = torch.nn.functional.normalize(torch.randn(24, 6, generator=generator), dim=1)
    ours_input = embeddings.clone().requires_grad_(True)
    pml_input = embeddings.clone().requires_grad_(True)

    tcm = dmlplug.create("regularizer", "tcm", margin_plus=m_plus, margin_minus=m_minus)
    ours = tcm(StepOutput(embeddings=ours_input, labels=labels))
    pml = ThresholdConsistentMarginLoss(margin_plus=m_plus, margin_minus=m_minus)(pml_input, labels)
    assert ours.item() == pytest.approx(pml.item(), abs=1e-6)
    assert ours.item() == pytest.approx(_brute_force_tcm(embeddings, labels.tolist(), m_plus, m_minus), abs=1e-5)
    assert ours.item() > 0

    ours.backward()
    pml.backward()
    assert torch.isfinite(ours_input.grad).all()
    torch.testing.assert_close(ours_input.grad, pml_input.grad, atol=1e-6, rtol=1e-5)


def test_zero_without_hard_pairs_and_still_differentiable():
    # Positives coincide (s = 1 > m+) and negatives are orthogonal (s = 0 < m-): no hard pair at all.
    embeddings = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], requires_grad=True)
    term = dmlplug.create("regularizer", "tcm")(StepOutput(embeddings=embeddings,
                                                           labels=torch.tensor([0, 0, 1, 1])))
    assert term.item() == 0.0
    term.backward()
    assert torch.equal(embeddings.grad, torch.zeros_like(embeddings))


def test_only_the_term_with_hard_pairs_contributes():
    # All labels differ, so there is no positive pair and the positive term must be exactly 0.
    angle = torch.tensor([0.0, 0.3, 1.2])
    embeddings = torch.stack([angle.cos(), angle.sin()], dim=1)
    pos, neg = tcm_terms(embeddings, torch.tensor([0, 1, 2]), 0.9, 0.5)
    assert pos.item() == 0.0
    # Hard negatives: (0,1) s = cos 0.3 and (1,2) s = cos 0.9; (0,2) s = cos 1.2 < 0.5 is easy.
    expected = ((torch.cos(torch.tensor(0.3)) - 0.5) + (torch.cos(torch.tensor(0.9)) - 0.5)) / 2
    assert neg.item() == pytest.approx(expected.item(), abs=1e-6)


def test_fp32_under_bf16_autocast():
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(16, 32, generator=generator), dim=1)
    labels = torch.arange(4).repeat_interleave(4)
    tcm = dmlplug.create("regularizer", "tcm", margin_plus=0.1, margin_minus=0.0)
    reference = tcm(StepOutput(embeddings=embeddings, labels=labels))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # Control: autocast really lowers a plain matmul here, so the check below is not vacuous.
        assert (embeddings @ embeddings.t()).dtype == torch.bfloat16
        mixed = tcm(StepOutput(embeddings=embeddings, labels=labels))
    assert mixed.dtype == torch.float32
    assert mixed.item() == pytest.approx(reference.item(), rel=1e-6)


def test_rejects_margins_outside_the_cosine_range():
    with pytest.raises(RecipeError, match="margin_plus"):
        dmlplug.create("regularizer", "tcm", margin_plus=1.5)
    with pytest.raises(RecipeError, match="margn"):
        dmlplug.create("regularizer", "tcm", margn=0.5)
