"""Contract tests parametrized over the registry: every loss, miner, regularizer and sampler, and every
nested distance / reducer / PML regularizer table, builds from its defaults on a tiny context and behaves.

A component registered tomorrow is tested here automatically. A component that needs context the tests
cannot provide fails with a message naming the requirement (nothing is skipped).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from component_helpers import BATCH, EMBEDDING_SIZE, FEATURE_DIM, HOST, NUM_CLASSES, batch_labels, build, make_context

from dmlplug.engine.step import StepOutput
from dmlplug_builtins.pml_catalog import DISTANCES, REDUCERS, REGULARIZERS


def _names(kind: str) -> list[str]:
    return HOST.registry.names(kind)


def _loss_for(requires: frozenset[str]):
    """The context loss that satisfies a component's ``loss:*`` requirements."""
    from pytorch_metric_learning.losses import ProxyAnchorLoss, SoftTripleLoss

    if "loss:sub_centers" in requires:
        return SoftTripleLoss(NUM_CLASSES, EMBEDDING_SIZE, centers_per_class=3)
    return ProxyAnchorLoss(NUM_CLASSES, EMBEDDING_SIZE)


#: Requirements the step below provides; anything else must be added here before the test can pass.
PROVIDED = {"loss:proxies", "loss:sub_centers", "features", "feature_map", "views:1", "views:2"}


def _random_embeddings(batch: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.randn(batch, EMBEDDING_SIZE, requires_grad=True)
    return raw, torch.nn.functional.normalize(raw, dim=1)


def _assert_finite_grads(tensors) -> int:
    count = 0
    for t in tensors:
        if t.grad is not None:
            assert torch.isfinite(t.grad).all(), "non-finite gradient"
            count += 1
    return count


# -------------------------------------------------------------------------------------------------- losses


@pytest.mark.parametrize("name", _names("losses"))
def test_loss_builds_and_gives_finite_value_and_gradients(name, seeded):
    loss = build("losses", name)
    raw, embeddings = _random_embeddings()
    value = loss(embeddings, batch_labels())
    assert value.dim() == 0 and torch.isfinite(value), f"{name}: loss {value}"
    value.backward()
    assert _assert_finite_grads([raw, *loss.parameters()]) >= 1
    assert raw.grad is not None, f"{name}: no gradient reaches the embeddings"


@pytest.mark.parametrize("name", _names("losses"))
def test_loss_tags_match_behaviour(name, seeded):
    """uses_tuples / proxies / has_parameters / needs_num_classes say what the built loss really does."""
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    from dmlplug.engine.proxies import class_proxies

    info = HOST.registry.get("losses", name)
    labels = batch_labels()
    _, embeddings = _random_embeddings()
    embeddings = embeddings.detach()
    triplets = lmu.get_all_triplets_indices(labels)
    partial = tuple(t[:40] for t in triplets)

    def value(indices_tuple):
        torch.manual_seed(1)  # fresh, identically initialised loss: stateful losses compare fairly
        return build("losses", name)(embeddings, labels, indices_tuple)

    without = value(None)
    try:
        with_tuples = value(partial)
        changed = not torch.allclose(without, with_tuples)
    except (ValueError, AssertionError):
        changed = False  # the loss rejects mined tuples
    assert changed == ("uses_tuples" in info.tags), f"{name}: uses_tuples tag disagrees with behaviour"

    loss = build("losses", name)
    has_params = any(p.requires_grad for p in loss.parameters())
    assert has_params == ("has_parameters" in info.tags)
    if "proxies" in info.tags:
        proxies = class_proxies(loss)
        assert tuple(proxies.shape) == (NUM_CLASSES, EMBEDDING_SIZE) and proxies.requires_grad
    else:
        with pytest.raises(TypeError):
            class_proxies(loss)
    if "needs_num_classes" in info.tags:
        with pytest.raises(Exception, match="num_classes"):
            build("losses", name, make_context(num_classes=None))


# -------------------------------------------------------------------------------------------------- miners


def _miner_batch(info) -> torch.Tensor:
    if "packaged_triplets" in info.tags:
        # (anchor, positive, negative) triples: class c, class c, class c+1.
        return torch.tensor([[c, c, (c + 1) % NUM_CLASSES] for c in range(10)]).flatten() % NUM_CLASSES
    return batch_labels()


@pytest.mark.parametrize("name", _names("miners"))
def test_miner_returns_valid_index_tuples(name, seeded):
    info = HOST.registry.get("miners", name)
    miner = build("miners", name)
    labels = _miner_batch(info)
    _, embeddings = _random_embeddings(len(labels))
    tuples = miner(embeddings, labels)
    expected = 3 if "triplets" in info.tags else 4
    assert "triplets" in info.tags or "pairs" in info.tags, f"{name}: tag it pairs or triplets"
    assert len(tuples) == expected, f"{name}: {len(tuples)}-tuple, tags {sorted(info.tags)}"
    for t in tuples:
        assert t.dtype == torch.long and t.dim() == 1
        assert len(t) == 0 or (int(t.min()) >= 0 and int(t.max()) < len(labels))
    # Triplets share one length; pairs come as (a1, p) and (a2, n) of their own lengths.
    groups = [tuples] if expected == 3 else [tuples[:2], tuples[2:]]
    for group in groups:
        assert len({len(t) for t in group}) == 1, f"{name}: ragged tuple"
    assert sum(len(t) for t in tuples) > 0, f"{name}: mined nothing on an easy batch"
    y = labels
    if expected == 4:
        a1, p, a2, n = tuples
        assert (y[a1] == y[p]).all() and (a1 != p).all()
        assert (y[a2] != y[n]).all()
    else:
        a, p, n = tuples
        regular = (y[a] == y[p]) & (a != p) & (y[n] != y[a])
        if "rho_swap" in info.tags:
            # ρ-regularisation: (a, a, p') with p' another sample of a's class.
            regular |= (a == p) & (y[n] == y[a]) & (n != a)
        assert regular.all(), f"{name}: invalid triplets"


# -------------------------------------------------------------------------------------------------- regularizers


def _step_for(info, ctx) -> tuple[StepOutput, list[torch.Tensor]]:
    missing = set(info.requires) - PROVIDED
    assert not missing, (f"regularizer {info.name!r} requires {sorted(missing)}, which the contract test cannot "
                         "provide yet: extend PROVIDED and _step_for in tests/components/test_contracts.py")
    features = torch.randn(BATCH, FEATURE_DIM, requires_grad=True)
    projection = torch.randn(FEATURE_DIM, EMBEDDING_SIZE, requires_grad=True)
    embeddings = torch.nn.functional.normalize(features @ projection, dim=1)
    views = [torch.randn(BATCH, 3, 8, 8) for _ in range(2)]
    step = StepOutput(embeddings=embeddings, labels=batch_labels(), features=features,
                      feature_map=features[:, :, None, None].expand(-1, -1, 2, 2), loss_module=ctx.loss,
                      indices=torch.arange(BATCH), views=views, epoch=1, step=1)
    return step, [features, projection]


@pytest.mark.parametrize("name", _names("regularizers"))
def test_regularizer_builds_and_gives_finite_terms_and_gradients(name, seeded):
    info = HOST.registry.get("regularizers", name)
    ctx = make_context(loss=_loss_for(info.requires))
    regularizer = build("regularizers", name, ctx)
    step, inputs = _step_for(info, ctx)
    out = regularizer(step)
    terms = out if isinstance(out, dict) else {name: out}
    assert terms, f"{name}: no term"
    for key, term in terms.items():
        assert term.dim() == 0 and torch.isfinite(term), f"{name}/{key}: {term}"
    total = sum(terms.values())
    if total.requires_grad:
        total.backward()
    own = list(regularizer.parameters()) if isinstance(regularizer, torch.nn.Module) else []
    assert _assert_finite_grads([*inputs, *own, *ctx.loss.parameters()]) >= 1, f"{name}: no gradient"


# -------------------------------------------------------------------------------------------------- nested tables


@pytest.mark.parametrize("spec", DISTANCES, ids=lambda s: s.name)
def test_every_distance_table_builds_and_is_finite(spec, seeded):
    from dmlplug_builtins.pml_components import build_distance
    from dmlplug_builtins.pml_introspect import table_model

    distance = build_distance(table_model(spec, "distance")(name=spec.name))
    _, embeddings = _random_embeddings()
    assert torch.isfinite(distance(embeddings)).all()
    # The same table works nested in a miner that accepts any distance.
    assert build("miners", "multi_similarity", distance={"name": spec.aliases[0]}) is not None


def _reducer_table(spec) -> dict:
    if spec.name == "multiple":
        return {"name": "multiple", "reducers": {"pos_loss": {"name": "sum"}}, "default_reducer": {"name": "mean"}}
    if spec.name == "per_anchor":
        return {"name": "per_anchor", "reducer": {"name": "sum"}}
    return {"name": spec.name}


@pytest.mark.parametrize("spec", REDUCERS, ids=lambda s: s.name)
def test_every_reducer_table_reduces_a_loss(spec, seeded):
    # DivisorReducer divides by a count the loss must supply: PML's margin loss does.
    loss_name = "pml_margin" if spec.name == "divisor" else "contrastive"
    loss = build("losses", loss_name, reducer=_reducer_table(spec))
    raw, embeddings = _random_embeddings()
    value = loss(embeddings, batch_labels())
    if spec.name == "do_nothing":
        assert isinstance(value, dict) and set(value) == {"pos_loss", "neg_loss"}
        return
    assert value.dim() == 0 and torch.isfinite(value)
    value.backward()
    assert _assert_finite_grads([raw]) == 1


@pytest.mark.parametrize("spec", REGULARIZERS, ids=lambda s: s.name)
def test_every_pml_regularizer_table_nests_in_a_loss(spec, seeded):
    if "embeddings" in spec.tags:
        loss = build("losses", "contrastive", embedding_regularizer={"name": spec.name}, embedding_reg_weight=0.5)
    else:
        loss = build("losses", "soft_triple", centers_per_class=3, weight_regularizer={"name": spec.name})
    raw, embeddings = _random_embeddings()
    value = loss(embeddings, batch_labels())
    assert torch.isfinite(value)
    value.backward()
    assert _assert_finite_grads([raw, *loss.parameters()]) >= 1


# -------------------------------------------------------------------------------------------------- samplers


def _sampler_context(info, labels: np.ndarray, batch_size: int = 16, seed: int = 3):
    extras = {}
    if "dataset:super_labels" in info.requires:
        extras["train_super_labels"] = labels % 4
    missing = set(info.requires) - {"dataset:super_labels"}
    assert not missing, f"sampler {info.name!r} requires {sorted(missing)}: extend tests/components/test_contracts.py"
    return make_context(train_labels=labels, batch_size=batch_size, seed=seed, extras=extras)


def _uneven_labels() -> np.ndarray:
    # 12 classes of sizes 3..14 (some smaller than a per-class group) in shuffled order.
    rng = np.random.default_rng(0)
    return rng.permutation(np.repeat(np.arange(12), np.arange(3, 15))).astype(np.int64)


@pytest.mark.parametrize("name", _names("samplers"))
def test_sampler_gives_full_reproducible_batches(name):
    info = HOST.registry.get("samplers", name)
    labels = _uneven_labels()
    sampler = build("samplers", name, _sampler_context(info, labels))
    assert len(sampler) == len(labels) // 16
    sampler.set_epoch(1)
    first = list(sampler)
    assert len(first) == len(sampler)
    for batch in first:
        assert len(batch) == 16 and all(isinstance(i, int) and 0 <= i < len(labels) for i in batch)
    assert list(sampler) == first, "iterating twice in one epoch must give the same batches"
    again = build("samplers", name, _sampler_context(info, labels))
    again.set_epoch(2)
    second = list(again)
    again.set_epoch(1)
    assert list(again) == first, "batches must depend on (seed, epoch) only"
    assert second != first, "different epochs must differ"
    other_seed = build("samplers", name, _sampler_context(info, labels, seed=4))
    other_seed.set_epoch(1)
    assert list(other_seed) != first


@pytest.mark.parametrize("name", _names("samplers"))
def test_sampler_covers_classes_evenly(name):
    """Over many batches, class-aware samplers visit classes evenly and random follows the data."""
    info = HOST.registry.get("samplers", name)
    labels = _uneven_labels()
    sampler = build("samplers", name, _sampler_context(info, labels))
    counts = np.zeros(12)
    for epoch in range(1, 41):
        sampler.set_epoch(epoch)
        for batch in sampler:
            counts += np.bincount(labels[batch], minlength=12)
    share = counts / counts.sum()
    if name == "random":
        expected = np.bincount(labels) / len(labels)
    elif name == "hierarchical":
        return  # balanced over super-classes, not classes; covered in test_samplers.py
    else:
        expected = np.full(12, 1 / 12)
    assert np.abs(share - expected).max() < 0.25 * expected.max(), f"{name}: {np.round(share, 3)}"
    assert math.isclose(share.sum(), 1.0)
