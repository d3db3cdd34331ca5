"""Scaffold templates of the kinds a training step uses: losses, miners, regularizers, heads, backbones."""

from __future__ import annotations

from dmlplug.scaffold.template import KindTemplate

LOSS = KindTemplate(
    suffix="contrastive", module="loss", class_suffix="Loss",
    description="Cosine contrastive loss with positive and negative margins.",
    register_extra='tags=("uses_tuples",)',
    params='''
pos_margin: float = Field(0.8, ge=-1, le=1, description="Positive pairs are pulled above this cosine similarity.")
neg_margin: float = Field(0.3, ge=-1, le=1, description="Negative pairs are pushed below this cosine similarity.")
''',
    factory="return $Class(pos_margin=params.pos_margin, neg_margin=params.neg_margin)",
    implementation='''"""The ``$name`` loss as a module-level ``torch.nn.Module`` (imported only by the factory)."""

from __future__ import annotations

import torch
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu


class $Class(torch.nn.Module):
    """Cosine contrastive loss: mean hinge over positive pairs plus mean hinge over negative pairs.

    Without mined tuples every pair of the batch is used; with a miner, only the mined pairs (triplets
    are split into their positive and negative pairs).

    Args:
        pos_margin: Positive pairs are pulled above this cosine similarity.
        neg_margin: Negative pairs are pushed below this cosine similarity.
    """

    def __init__(self, pos_margin: float = 0.8, neg_margin: float = 0.3):
        super().__init__()
        self.pos_margin = pos_margin
        self.neg_margin = neg_margin

    def forward(self, embeddings, labels, indices_tuple=None):
        """The loss of a batch (PML's calling convention)."""
        sims = embeddings @ embeddings.t()
        if indices_tuple is None:
            a1, p, a2, n = lmu.get_all_pairs_indices(labels)
        else:
            a1, p, a2, n = lmu.convert_to_pairs(indices_tuple, labels)
        pos = torch.relu(self.pos_margin - sims[a1, p])
        neg = torch.relu(sims[a2, n] - self.neg_margin)
        zero = sims.sum() * 0  # keeps the graph when a batch has no pair of a kind
        return (pos.mean() if pos.numel() else zero) + (neg.mean() if neg.numel() else zero)
''',
    tests='''
import pytest
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


@pytest.mark.parametrize(("embeddings", "labels", "expected"), [
    ([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [0, 0, 1], 0.0),  # positives identical, negatives orthogonal
    ([[1.0, 0.0], [0.0, 1.0]], [0, 0], 0.8),                 # one orthogonal positive pair: 0.8 - 0
    ([[1.0, 0.0], [1.0, 0.0]], [0, 1], 0.7),                 # one identical negative pair: 1 - 0.3
])
def test_known_answers(embeddings, labels, expected):
    loss = build("$kind", "$name", host=load_host($module))
    value = loss(torch.tensor(embeddings), torch.tensor(labels))
    assert float(value) == pytest.approx(expected)
''',
    recipe='''
[loss]
name = "$name"
pos_margin = 0.8
''')

MINER = KindTemplate(
    suffix="hard_pairs", module="miner", class_suffix="Miner",
    description="Positive pairs less similar than pos_margin and negative pairs more similar than neg_margin.",
    register_extra='tags=("pairs",)',
    params='''
pos_margin: float = Field(0.8, ge=-1, le=1, description="Positive pairs below this cosine similarity are mined.")
neg_margin: float = Field(0.3, ge=-1, le=1, description="Negative pairs above this cosine similarity are mined.")
''',
    factory="return $Class(pos_margin=params.pos_margin, neg_margin=params.neg_margin)",
    implementation='''"""The ``$name`` miner (imported only by the factory)."""

from __future__ import annotations

import torch
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu


class $Class(torch.nn.Module):
    """Hard pairs of a batch, as PML's pair tuple ``(a1, p, a2, n)``.

    Args:
        pos_margin: A positive pair is hard below this cosine similarity.
        neg_margin: A negative pair is hard above it.
    """

    def __init__(self, pos_margin: float = 0.8, neg_margin: float = 0.3):
        super().__init__()
        self.pos_margin = pos_margin
        self.neg_margin = neg_margin

    def forward(self, embeddings, labels):
        """The hard pairs among all pairs of the batch."""
        with torch.no_grad():
            unit = torch.nn.functional.normalize(embeddings, dim=1)
            sims = unit @ unit.t()
            a1, p, a2, n = lmu.get_all_pairs_indices(labels)
            hard_pos = sims[a1, p] < self.pos_margin
            hard_neg = sims[a2, n] > self.neg_margin
        return a1[hard_pos], p[hard_pos], a2[hard_neg], n[hard_neg]
''',
    tests='''
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_known_answer():
    miner = build("$kind", "$name", host=load_host($module))
    # 0 and 1 share a class but are orthogonal (hard); 0 and 2 differ but are identical (hard); 1 and 2 are not.
    embeddings = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    a1, p, a2, n = miner(embeddings, torch.tensor([0, 0, 1]))
    assert sorted(zip(a1.tolist(), p.tolist(), strict=True)) == [(0, 1), (1, 0)]
    assert sorted(zip(a2.tolist(), n.tolist(), strict=True)) == [(0, 2), (2, 0)]
''',
    recipe='''
[miner]
name = "$name"
pos_margin = 0.8
''')

REGULARIZER = KindTemplate(
    suffix="uniformity", module="regularizer", class_suffix="Regularizer",
    description="Uniformity of the batch's embeddings on the sphere (Wang & Isola 2020).",
    params='''
t: float = Field(2.0, gt=0, description="Temperature t of log mean exp(-t·|e_i - e_j|²).")
''',
    factory="return $Class(t=params.t)",
    implementation='''"""The ``$name`` regularizer (imported only by the factory)."""

from __future__ import annotations

import torch


class $Class(torch.nn.Module):
    """``log mean_{i<j} exp(-t·|e_i - e_j|²)`` over the batch's embeddings: lower is more uniform.

    Args:
        t: The temperature.
    """

    def __init__(self, t: float = 2.0):
        super().__init__()
        self.t = t

    def forward(self, step):
        """The term of one training step (a ``dmlplug.step.StepOutput``)."""
        e = step.embeddings
        i, j = torch.triu_indices(len(e), len(e), offset=1, device=e.device)
        squared = (e[i] - e[j]).pow(2).sum(dim=1)
        return torch.log(torch.exp(-self.t * squared).mean())
''',
    tests='''
import math
from types import SimpleNamespace

import pytest
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


@pytest.mark.parametrize(("embeddings", "expected"), [
    ([[1.0, 0.0], [1.0, 0.0]], 0.0),               # identical: log exp(0)
    ([[1.0, 0.0], [0.0, 1.0]], -4.0),              # orthogonal: |e_i - e_j|² = 2, t = 2
    ([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]], math.log((2 * math.exp(-8) + 1) / 3)),
])
def test_known_answers(embeddings, expected):
    term = build("$kind", "$name", host=load_host($module))
    assert float(term(SimpleNamespace(embeddings=torch.tensor(embeddings)))) == pytest.approx(expected)
''',
    recipe='''
[[regularizers]]
name = "$name"
weight = 0.1
''')

HEAD = KindTemplate(
    suffix="cosine_head", module="head", class_suffix="Head",
    description="A linear map of the pooled features to unit-length embeddings.",
    params='''
embedding_size: int = Field(128, ge=1, description="Size of the embedding.")
''',
    factory="return $Class(ctx.require(\"feature_dim\"), params.embedding_size)",
    implementation='''"""The ``$name`` head (imported only by the factory)."""

from __future__ import annotations

import torch


class $Class(torch.nn.Module):
    """Pooled features -> ``normalize(W·features)``.

    Args:
        feature_dim: Size of the backbone's pooled features.
        embedding_size: Size of the embedding.
    """

    def __init__(self, feature_dim: int, embedding_size: int):
        super().__init__()
        self.embedding_size = embedding_size
        self.linear = torch.nn.Linear(feature_dim, embedding_size, bias=False)

    def forward(self, features):
        """``B×embedding_size`` unit vectors."""
        return torch.nn.functional.normalize(self.linear(features), dim=1)
''',
    tests='''
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host, make_context


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_known_answer():
    host = load_host($module)
    head = build("$kind", "$name", ctx=make_context(host, feature_dim=3), host=host, embedding_size=2)
    with torch.no_grad():
        head.linear.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    out = head(torch.tensor([[3.0, 4.0, 7.0]]))
    assert torch.allclose(out, torch.tensor([[0.6, 0.8]]))  # (3, 4) scaled to unit length
''',
    recipe='''
[head]
name = "$name"
embedding_size = 128
''')

BACKBONE = KindTemplate(
    suffix="tiny_cnn", module="backbone", class_suffix="Backbone", checked=False,
    description="Two 3x3 convolutions and global average pooling: a backbone to start from.",
    params='''
channels: int = Field(32, ge=1, description="Channels of both convolutions (the pooled feature size).")
''',
    factory="return $Class(params.channels)",
    implementation='''"""The ``$name`` backbone (imported only by the factory)."""

from __future__ import annotations

import torch


class $Class(torch.nn.Module):
    """Images -> ``(pooled features B×C, feature map B×C×h×w)``.

    Args:
        channels: Channels of both convolutions.
    """

    def __init__(self, channels: int = 32):
        super().__init__()
        self.num_features = channels
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(channels, channels, 3, padding=1, stride=2), torch.nn.ReLU())

    def forward(self, images):
        """Pooled features and the feature map they are the mean of."""
        feature_map = self.body(images)
        return feature_map.mean(dim=(2, 3)), feature_map
''',
    tests='''
import torch

import $module
from dmlplug.testing import build, load_host


def test_features_are_the_mean_of_the_feature_map():
    backbone = build("$kind", "$name", host=load_host($module), channels=8)
    features, feature_map = backbone(torch.randn(2, 3, 16, 16))
    assert backbone.num_features == 8
    assert features.shape == (2, 8) and feature_map.shape == (2, 8, 8, 8)
    assert torch.allclose(features, feature_map.mean(dim=(2, 3)))


def test_a_black_image_gives_the_biases_through_both_layers():
    backbone = build("$kind", "$name", host=load_host($module), channels=4)
    first, second = backbone.body[0], backbone.body[2]
    with torch.no_grad():
        for conv in (first, second):
            conv.weight.zero_()
            conv.bias.copy_(torch.tensor([1.0, -1.0, 2.0, 0.5]))
    features, _ = backbone(torch.zeros(1, 3, 8, 8))
    assert torch.allclose(features, torch.tensor([[1.0, 0.0, 2.0, 0.5]]))  # relu(bias), the 2nd layer's weights 0
''',
    recipe='''
[backbone]
name = "$name"
channels = 32
''')

TEMPLATES = {"losses": LOSS, "miners": MINER, "regularizers": REGULARIZER, "heads": HEAD, "backbones": BACKBONE}
