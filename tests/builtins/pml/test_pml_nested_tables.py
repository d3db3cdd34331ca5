"""Nested tables of PML losses and miners: every distance, reducer and PML regularizer table builds and works,
and nested loss / miner tables resolve in the registry of the host that validates and builds them."""

from __future__ import annotations

import types

import pytest
import torch

from dmlplug import hookimpl
from dmlplug.errors import RecipeError
from dmlplug.testing import batch_labels, build, load_host, make_context
from dmlplug_builtins.pml import MultipleLossesParams
from dmlplug_builtins.pml.catalog import DISTANCES, REDUCERS, REGULARIZERS
from dmlplug_builtins.pml.introspect import table_model


def _random_embeddings(batch: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.randn(batch, 16, requires_grad=True)
    return raw, torch.nn.functional.normalize(raw, dim=1)


def _assert_finite_grads(tensors) -> int:
    count = 0
    for t in tensors:
        if t.grad is not None:
            assert torch.isfinite(t.grad).all(), "non-finite gradient"
            count += 1
    return count


@pytest.mark.parametrize("spec", DISTANCES, ids=lambda s: s.name)
def test_every_distance_table_builds_and_is_finite(spec, seeded):
    from dmlplug_builtins.pml.builders import build_distance

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


# -------------------------------------------------------------------------------------------------- nested components


class _Doubled(torch.nn.Module):
    """A loss only the probe plugin below registers: twice the contrastive loss."""

    def __init__(self):
        super().__init__()
        from pytorch_metric_learning.losses import ContrastiveLoss

        self.inner = ContrastiveLoss()

    def forward(self, embeddings, labels, indices_tuple=None):
        return 2 * self.inner(embeddings, labels, indices_tuple)


def _probe_host():
    """The built-ins plus a plugin that registers loss 'doubled_contrastive'."""

    def register_losses(register):
        register("doubled_contrastive", lambda params, ctx: _Doubled(), tags=("uses_tuples",))

    module = types.ModuleType("probe_nested")
    module.register_losses = hookimpl(register_losses)
    return load_host(module)


def test_nested_tables_resolve_in_the_registry_that_validates_them(seeded):
    host = _probe_host()
    info = host.registry.get("losses", "multiple_losses")
    table = {"losses": [{"name": "doubled_contrastive"}, {"name": "contrastive"}], "weights": [1.0, 1.0]}
    params = info.validate(table, where="loss", registry=host.registry)
    # The default host does not know the probe's loss: the name is checked against the registry handed over.
    with pytest.raises(RecipeError, match="doubled_contrastive"):
        info.validate(table, where="loss", registry=load_host().registry)
    # Built through ctx.build, i.e. the registry of the host the context belongs to.
    loss = info.build(params, make_context(host))
    assert isinstance(loss.losses[0], _Doubled)
    embeddings = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    labels = batch_labels()
    expected = 3 * loss.losses[1](embeddings, labels)
    assert loss(embeddings, labels).item() == pytest.approx(expected.item(), rel=1e-5)


def test_without_a_registry_only_the_shape_of_a_nested_table_is_checked():
    # A bare model_validate (no validation context) cannot know which registry will build the table.
    params = MultipleLossesParams.model_validate({"losses": [{"name": "not_registered_anywhere"}]})
    assert params.losses == [{"name": "not_registered_anywhere"}]
    with pytest.raises(ValueError, match="needs a \"name\" key"):
        MultipleLossesParams.model_validate({"losses": [{"margin": 0.1}]})
