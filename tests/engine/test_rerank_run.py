"""A run with [evaluation] rerank logs the re-ranked kNN metrics beside the plain ones and may select on them."""

from __future__ import annotations

import json

import dmlplug

SMALL = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
         "data.sampler.batches_per_epoch=2", "head.embedding_size=8", "run.epochs=1"]


def test_a_run_reports_reranked_metrics_and_selects_on_one(tiny_recipe, tmp_path):
    overrides = [*SMALL, 'evaluators=[{name="recall", k=[1, 2]}, {name="nmi"}]',
                 'evaluation.rerank=[{name="aqe", n=2}, "krnn:k1=4,k2=2,shortlist=20"]',
                 'evaluation.metric="recall@1+krnn"']
    result = dmlplug.run(tiny_recipe, overrides=overrides, out=tmp_path / "run", quiet=True)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines
    for line in lines:
        assert {"recall@1+aqe", "recall@2+aqe", "recall@1+krnn", "recall@2+krnn"} <= set(line)
        assert not any(key.startswith("nmi+") or key.startswith("excluded_queries+") for key in line)
        assert all(0.0 <= line[key] <= 1.0 for key in line if "+" in key)
    assert "recall@1+krnn" in result.best_metrics
