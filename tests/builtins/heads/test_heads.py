"""The built-in heads: linear and MLP embeddings are normalised, the multi head concatenates with weights."""

import torch

import dmlplug
from dmlplug.protocols import MultiHead
from dmlplug_builtins.heads.modules import LinearHead, MlpHead
from dmlplug_builtins.heads.modules import MultiHead as MultiHeadModule


def test_heads_normalise_and_multi_head_concatenates_with_weights():
    feats = torch.randn(5, 32)
    lin = dmlplug.create("head", "linear", embedding_size=8, feature_dim=32)
    assert lin.embedding_size == 8
    torch.testing.assert_close(lin(feats).norm(dim=1), torch.ones(5))
    mlp = dmlplug.create("head", "mlp", embedding_size=6, hidden=[16, 16], feature_dim=32)
    assert mlp(feats).shape == (5, 6)
    multi = dmlplug.create("head", "multi", heads={"a": 4, "b": 3}, weights=[2.0, 1.0], feature_dim=32)
    out = multi(feats)
    emb = multi.eval_embedding(out)
    expected = torch.nn.functional.normalize(torch.cat([2 * out["a"], out["b"]], 1), dim=1)
    torch.testing.assert_close(emb, expected)
    assert multi.embedding_size == 7


def test_heads_are_module_level_classes_and_keep_their_state_dict_keys():
    # Checkpoints store these keys: a head's parameter names are part of the run directory's format.
    lin = dmlplug.create("head", "linear", embedding_size=8, feature_dim=32)
    mlp = dmlplug.create("head", "mlp", embedding_size=6, hidden=[16], feature_dim=32)
    multi = dmlplug.create("head", "multi", heads={"a": 4, "b": 3}, feature_dim=32)
    assert isinstance(lin, LinearHead) and isinstance(mlp, MlpHead) and isinstance(multi, MultiHeadModule)
    assert isinstance(multi, MultiHead)
    assert set(lin.state_dict()) == {"fc.weight", "fc.bias"}
    assert set(mlp.state_dict()) == {"net.0.weight", "net.0.bias", "net.3.weight", "net.3.bias"}
    assert set(multi.state_dict()) == {"heads.a.weight", "heads.a.bias", "heads.b.weight", "heads.b.bias", "weights"}
