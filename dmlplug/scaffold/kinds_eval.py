"""Scaffold templates of evaluators, loggers and the kinds nested in losses: distances and reducers."""

from __future__ import annotations

from dmlplug.scaffold.template import KindTemplate

EVALUATOR = KindTemplate(
    suffix="precision_at_1", module="evaluator", class_suffix="Evaluator",
    description="The share of queries whose nearest gallery item has their class.",
    params='''
per_class: bool = Field(False, description="Average per class first (each class weighs the same).")

def metric_names(self) -> tuple[str, ...]:
    """What evaluate returns (dmlplug validate checks [evaluation] metric against it)."""
    return ("precision@1",)

def reads_neighbours(self) -> bool:
    """It reads the kNN list (so [evaluation] rerank reports it again after re-ranking)."""
    return True
''',
    factory="return $Class(per_class=params.per_class)",
    implementation='''"""The ``$name`` evaluator (imported only by the factory)."""

from __future__ import annotations

import numpy as np


class $Class:
    """Precision@1 from the shared kNN graph of the evaluation (``dmlplug.evaluation.EvalContext``).

    Args:
        per_class: Average per class first.
    """

    def __init__(self, per_class: bool = False):
        self.per_class = per_class

    def required_k(self, eval_context):
        """One neighbour per query: the graph is searched once for every evaluator."""
        return 1

    def evaluate(self, eval_context):
        """``{"precision@1": value}``; NaN when no query has an item of its class in the gallery."""
        if len(eval_context.knn_queries) == 0:
            return {"precision@1": float("nan")}
        first = eval_context.hits(1)[:, 0].astype(float)
        if self.per_class:
            return {"precision@1": float(np.mean(list(eval_context.per_class_mean(first).values())))}
        return {"precision@1": float(first.mean())}
''',
    tests='''
import numpy as np
import pytest

import $module
from dmlplug.evaluation import EvalContext
from dmlplug.testing import build, check_plugin, load_host

POINTS = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]], dtype=np.float32)


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


# In the last case the lone query 3 is left out; of 0, 1 and 2 the first two find their class.
@pytest.mark.parametrize(("labels", "expected"), [([0, 0, 1, 1], 1.0), ([0, 1, 0, 1], 0.0), ([0, 0, 0, 1], 2 / 3)])
def test_known_answers(labels, expected):
    evaluator = build("$kind", "$name", host=load_host($module))
    context = EvalContext(POINTS, np.array(labels), backend="torch")
    assert evaluator.evaluate(context)["precision@1"] == pytest.approx(expected)
''',
    recipe='''
[[evaluators]]
name = "$name"
''')

LOGGER = KindTemplate(
    suffix="jsonl", module="logger", class_suffix="Logger",
    description="Every evaluation's metrics as one JSON line in the run directory.",
    params='''
file: str = Field("metrics.jsonl", description="File name in the run directory.")
''',
    factory="return $Class(params.file)",
    implementation='''"""The ``$name`` logger (imported only by the factory)."""

from __future__ import annotations

import json

from dmlplug import hookimpl


class $Class:
    """Appends ``{"epoch", "split", **metrics}`` to ``<run directory>/<file>`` after every evaluation.

    Args:
        file: File name in the run directory.
    """

    def __init__(self, file: str):
        self.file = file

    @hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        """One line per evaluation."""
        with (run.directory / self.file).open("a", encoding="utf-8") as out:
            out.write(json.dumps({"epoch": epoch, "split": split, **metrics}) + "\\n")
''',
    tests='''
import json
from types import SimpleNamespace

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_one_line_per_evaluation(tmp_path):
    logger = build("$kind", "$name", host=load_host($module))
    run = SimpleNamespace(directory=tmp_path)
    logger.on_eval_end(run=run, epoch=1, split="test", metrics={"recall@1": 0.5})
    logger.on_eval_end(run=run, epoch=2, split="test", metrics={"recall@1": 0.75})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"epoch": 1, "split": "test", "recall@1": 0.5},
                                                    {"epoch": 2, "split": "test", "recall@1": 0.75}]
''',
    recipe='''
[[loggers]]
name = "$name"
''')

DISTANCE = KindTemplate(
    suffix="chebyshev", module="distance", class_suffix="Distance",
    description="The L-infinity (Chebyshev) distance, for any PML loss or miner.",
    params='''
normalize_embeddings: bool = Field(True, description="L2-normalise the embeddings first.")
''',
    factory="return $Class(normalize_embeddings=params.normalize_embeddings)",
    implementation='''"""The ``$name`` distance (imported only by the factory)."""

from __future__ import annotations

import torch
from pytorch_metric_learning.distances import BaseDistance


class $Class(BaseDistance):
    """``max_i |q_i - r_i|`` as a PML distance (smaller is closer)."""

    def compute_mat(self, query_emb, ref_emb):
        """The ``Q×R`` matrix."""
        return torch.cdist(query_emb, query_emb if ref_emb is None else ref_emb, p=float("inf"))

    def pairwise_distance(self, query_emb, ref_emb):
        """Row by row."""
        return (query_emb - ref_emb).abs().amax(dim=1)
''',
    tests='''
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_known_answer():
    host = load_host($module)
    distance = build("$kind", "$name", host=host, normalize_embeddings=False)
    q = torch.tensor([[0.0, 0.0], [1.0, 3.0]])
    assert distance(q).tolist() == [[0.0, 3.0], [3.0, 0.0]]
''',
    recipe='''
[loss]
name = "contrastive"
distance = {name = "$name"}
''')

REDUCER = KindTemplate(
    suffix="top_k_mean", module="reducer", class_suffix="Reducer",
    description="The mean of the k largest per-element losses (hardest-k), for any PML loss.",
    params='''
k: int = Field(8, ge=1, description="How many of the largest losses are averaged.")
''',
    factory="return $Class(params.k)",
    implementation='''"""The ``$name`` reducer (imported only by the factory)."""

from __future__ import annotations

from pytorch_metric_learning.reducers import BaseReducer


class $Class(BaseReducer):
    """The mean of the ``k`` largest losses (all of them when there are fewer).

    Args:
        k: How many losses are averaged.
    """

    def __init__(self, k: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.k = k

    def element_reduction(self, losses, *_):
        """Per-element, per-pair and per-triplet losses are reduced alike."""
        if losses.numel() == 0:
            return losses.sum()  # zero, with the graph
        return losses.topk(min(self.k, losses.numel())).values.mean()

    def pos_pair_reduction(self, losses, *args):
        """Positive pairs' losses."""
        return self.element_reduction(losses, *args)

    def neg_pair_reduction(self, losses, *args):
        """Negative pairs' losses."""
        return self.element_reduction(losses, *args)

    def triplet_reduction(self, losses, *args):
        """Triplets' losses."""
        return self.element_reduction(losses, *args)
''',
    tests='''
import pytest
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_known_answer():
    reducer = build("$kind", "$name", host=load_host($module), k=2)
    losses = torch.tensor([0.1, 0.9, 0.4, 0.7])
    loss_dict = {"loss": {"losses": losses, "indices": torch.arange(4), "reduction_type": "element"}}
    assert float(reducer(loss_dict, torch.zeros(4, 2), torch.arange(4))) == pytest.approx((0.9 + 0.7) / 2)
''',
    recipe='''
[loss]
name = "triplet_margin"
reducer = {name = "$name", k = 8}
''')

TEMPLATES = {"evaluators": EVALUATOR, "loggers": LOGGER, "distances": DISTANCE, "reducers": REDUCER}
