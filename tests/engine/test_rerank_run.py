"""A run with [evaluation] rerank logs the re-ranked kNN metrics beside the plain ones and may select on them."""

from __future__ import annotations

import json

import dmlplug
from dmlplug.evaluation.best import is_candidate

SMALL = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
         "data.sampler.batches_per_epoch=2", "head.embedding_size=8"]
SELECT = "recall@1+krnn"


def _first_best(lines, metric, mode):
    """The epoch that [evaluation] metric/mode select among ``lines`` (dmlplug.evaluation.best's rules, by hand)."""
    candidates = [line for line in lines if is_candidate(line["epoch"])]
    best = (min if mode == "min" else max)(line[metric] for line in candidates)
    return next(line["epoch"] for line in candidates if line[metric] == best)


def test_a_run_reports_reranked_metrics_and_selects_on_one(tiny_recipe, tmp_path, single_thread):
    # Five evaluations (the untrained model, then every epoch) so that selection has a choice to make. "min" is only
    # there because, on this seed, the re-ranked metric's lowest epoch differs from the plain metrics' lowest ones:
    # a run that selected on recall@1 or recall@1+aqe instead would pick another epoch.
    overrides = [*SMALL, "run.seed=0", "run.epochs=4", "evaluation.every=1", "evaluation.initial=true",
                 'evaluators=[{name="recall", k=[1, 2]}, {name="nmi"}]',
                 'evaluation.rerank=[{name="aqe", n=2}, "krnn:k1=4,k2=2,shortlist=20"]',
                 f'evaluation.metric="{SELECT}"', 'evaluation.mode="min"']
    result = dmlplug.run(tiny_recipe, overrides=overrides, out=tmp_path / "run", quiet=True)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1, 2, 3, 4]
    for line in lines:
        assert {"recall@1+aqe", "recall@2+aqe", "recall@1+krnn", "recall@2+krnn"} <= set(line)
        assert not any(key.startswith("nmi+") or key.startswith("excluded_queries+") for key in line)
        assert all(0.0 <= line[key] <= 1.0 for key in line if "+" in key)
    selected = _first_best(lines, SELECT, "min")
    others = {metric: _first_best(lines, metric, "min") for metric in ("recall@1", "recall@1+aqe")}
    assert all(epoch != selected for epoch in others.values()), (
        f"{SELECT} selects epoch {selected}, and so do some of {others}: this run cannot tell them apart")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["selection_metric"] == SELECT and results["selection_mode"] == "min"
    assert results["best_epoch"] == selected
    chosen = next(line for line in lines if line["epoch"] == selected)
    assert result.best_metrics[SELECT] == chosen[SELECT]
    assert results["best_metrics"] == {k: v for k, v in chosen.items() if k in results["best_metrics"]}
