"""NIR regularizer: conditioning on real PML proxies, fp32 term, optimizer groups, errors, ProxyAnchor mapping."""

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import ContrastiveLoss, ProxyAnchorLoss

import dmlplug
from dmlplug.errors import ComponentError, RunError
from dmlplug.step import StepOutput


def _batch(num_classes, per_class, dim, seed=0):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    embeddings = F.normalize(torch.randn(len(labels), dim, generator=generator), dim=1)
    return embeddings, labels


def _nir(loss, dim, **params):
    return dmlplug.create("regularizer", "nir", loss=loss, embedding_size=dim,
                          num_classes=loss.num_classes, **params)


def test_term_is_the_flow_nll_around_the_normalised_class_proxy():
    torch.manual_seed(0)
    loss = ProxyAnchorLoss(num_classes=10, embedding_size=16)
    nir = _nir(loss, 16, n_blocks=2, subnet_depth=3, subnet_width=32)
    embeddings, labels = _batch(4, 3, 16)
    out = nir(StepOutput(embeddings=embeddings, labels=labels, loss_module=loss))
    assert set(out) == {"flow"}

    z, logdet = nir.flow(embeddings, context=F.normalize(loss.proxies, dim=1)[labels])
    expected = torch.exp(0.5 * (z ** 2).sum(1) - logdet).mean()
    assert out["flow"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_gradients_reach_only_the_proxies_of_batch_classes():
    torch.manual_seed(0)
    loss = ProxyAnchorLoss(num_classes=10, embedding_size=16)
    nir = _nir(loss, 16, n_blocks=2, subnet_depth=3, subnet_width=32)
    embeddings, labels = _batch(4, 3, 16)  # classes 0..3 only
    embeddings.requires_grad_(True)
    nir(StepOutput(embeddings=embeddings, labels=labels, loss_module=loss))["flow"].backward()
    grad_norms = loss.proxies.grad.norm(dim=1)
    assert (grad_norms[:4] > 0).all() and (grad_norms[4:] == 0).all()
    assert torch.isfinite(embeddings.grad).all() and embeddings.grad.abs().sum() > 0
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in nir.flow.parameters())

    loss.proxies.grad = None
    detached = _nir(loss, 16, n_blocks=2, subnet_depth=3, subnet_width=32, proxy_backprop=False)
    detached(StepOutput(embeddings=embeddings, labels=labels, loss_module=loss))["flow"].backward()
    assert loss.proxies.grad is None


def test_moving_one_proxy_changes_only_its_samples():
    torch.manual_seed(0)
    loss = ProxyAnchorLoss(num_classes=4, embedding_size=8)
    nir = _nir(loss, 8, n_blocks=2, subnet_depth=3, subnet_width=16)
    embeddings, labels = _batch(4, 2, 8)
    with torch.no_grad():
        before = nir.negative_log_likelihood(embeddings, labels, loss.proxies)
        loss.proxies[2] = torch.randn(8)
        after = nir.negative_log_likelihood(embeddings, labels, loss.proxies)
    changed = (before - after).abs() > 1e-6
    assert changed.tolist() == (labels == 2).tolist()


@pytest.mark.parametrize("dim", [128, 512])
def test_finite_at_init_with_realistic_inputs(dim):
    for seed in range(3):
        torch.manual_seed(seed)
        loss = ProxyAnchorLoss(num_classes=100, embedding_size=dim)
        nir = _nir(loss, dim)
        embeddings, labels = _batch(45, 2, dim, seed=seed)  # the reference batch: 90 images, 2 per class
        embeddings.requires_grad_(True)
        nll = nir.negative_log_likelihood(embeddings, labels, loss.proxies)
        # exp overflows fp32 at 88.7; at init ℓ stays in single digits to low tens (see docs/methods/nir.md).
        assert nll.max().item() < 44.0
        term = nir(StepOutput(embeddings=embeddings, labels=labels, loss_module=loss))["flow"]
        assert torch.isfinite(term) and term.item() > 0
        term.backward()
        assert torch.isfinite(embeddings.grad).all() and torch.isfinite(loss.proxies.grad).all()


def test_term_stays_fp32_under_bf16_autocast():
    torch.manual_seed(0)
    loss = ProxyAnchorLoss(num_classes=8, embedding_size=32)
    nir = _nir(loss, 32, n_blocks=2, subnet_depth=3, subnet_width=32)
    embeddings, labels = _batch(8, 2, 32)
    step = StepOutput(embeddings=embeddings, labels=labels, loss_module=loss)
    reference = nir(step)["flow"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # Control: without the guard the flow's Linear layers would run in bf16 here.
        assert nir.flow._transforms[1].transform_net(embeddings[:, :16], embeddings).dtype == torch.bfloat16
        mixed = nir(step)["flow"]
        mixed_from_bf16_input = nir(StepOutput(embeddings=embeddings.bfloat16(), labels=labels,
                                               loss_module=loss))["flow"]
    assert mixed.dtype == torch.float32 and mixed_from_bf16_input.dtype == torch.float32
    assert mixed.item() == pytest.approx(reference.item(), rel=1e-6)


def test_optimizer_groups_hold_the_flow_only():
    torch.manual_seed(0)
    loss = ProxyAnchorLoss(num_classes=5, embedding_size=8)
    nir = _nir(loss, 8, n_blocks=1, subnet_depth=2, subnet_width=8)
    groups = nir.optimizer_param_groups()
    assert [g["name"] for g in groups] == ["nir"]  # the engine's default name for this regularizer
    assert groups[0]["lr_mult"] == 50.0 and groups[0]["weight_decay"] == 0.0
    assert {id(p) for p in groups[0]["params"]} == {id(p) for p in nir.flow.parameters()}
    # The proxies belong to the loss's group: not registered here, not in the state dict either.
    assert all(p is not loss.proxies for p in nir.parameters())
    assert not any("proxies" in key for key in nir.state_dict())

    custom = _nir(loss, 8, n_blocks=1, subnet_depth=2, subnet_width=8, lr_mult=10.0, weight_decay=None)
    assert custom.optimizer_param_groups()[0]["lr_mult"] == 10.0
    assert custom.optimizer_param_groups()[0]["weight_decay"] is None


def test_flow_term_decreases_when_trained():
    torch.manual_seed(0)
    loss = ProxyAnchorLoss(num_classes=4, embedding_size=8)
    nir = _nir(loss, 8, n_blocks=2, subnet_depth=3, subnet_width=32)
    embeddings, labels = _batch(4, 4, 8)
    step = StepOutput(embeddings=embeddings, labels=labels, loss_module=loss)
    optimizer = torch.optim.Adam(nir.parameters(), lr=5e-3)
    first = nir(step)["flow"].item()
    for _ in range(30):
        optimizer.zero_grad()
        nir(step)["flow"].backward()
        optimizer.step()
    assert nir(step)["flow"].item() < 0.5 * first


def test_build_time_loss_is_used_when_the_step_has_none():
    torch.manual_seed(0)
    loss = ProxyAnchorLoss(num_classes=4, embedding_size=8)
    nir = _nir(loss, 8, n_blocks=1, subnet_depth=2, subnet_width=8)
    embeddings, labels = _batch(4, 2, 8)
    with_loss = nir(StepOutput(embeddings=embeddings, labels=labels, loss_module=loss))["flow"]
    without = nir(StepOutput(embeddings=embeddings, labels=labels))["flow"]
    assert with_loss.item() == without.item()


def test_losses_without_proxies_are_rejected():
    with pytest.raises(ComponentError, match="no loss was built") as missing:
        dmlplug.create("regularizer", "nir", embedding_size=8)
    assert "proxy-based loss" in missing.value.fix
    with pytest.raises(ComponentError, match="ContrastiveLoss has none"):
        dmlplug.create("regularizer", "nir", loss=ContrastiveLoss(), embedding_size=8)

    loss = ProxyAnchorLoss(num_classes=4, embedding_size=8)
    nir = _nir(loss, 8, n_blocks=1, subnet_depth=2, subnet_width=8)
    embeddings, labels = _batch(4, 2, 8)
    with pytest.raises(RunError, match="needs class proxies"):
        nir(StepOutput(embeddings=embeddings, labels=labels, loss_module=ContrastiveLoss()))


def test_registered_with_its_requirement_and_defaults():
    from dmlplug.plugins import PluginHost

    registry = PluginHost().load(entry_points=False).registry
    nir = registry.get("regularizers", "nir")
    assert nir.requires == frozenset({"loss:proxies"})
    defaults = nir.params()
    assert (defaults.n_blocks, defaults.subnet_depth, defaults.subnet_width, defaults.clamp) == (5, 8, 128, 2.0)
    assert (defaults.lr_mult, defaults.weight_decay) == (50.0, 0.0)
    assert all(field.description for field in nir.params.model_fields.values())
    tcm = registry.get("regularizers", "tcm")
    assert tcm.requires == frozenset()
    assert all(field.description for field in tcm.params.model_fields.values())
