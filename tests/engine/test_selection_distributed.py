"""Selection on val and the end-of-run report of best.pt on test under torchrun (2 CPU processes, gloo): rank 0
loads best.pt and every rank evaluates those weights, so the reported numbers are best.pt's."""

import json

import pytest
from test_distributed import _torchrun
from test_selection import EVALUATORS, SMALL, VAL, evaluate_best_on_test

# The countdown evaluator of test_selection, registered in the process-wide host of each torchrun process.
SCRIPT = """
import sys
from collections import Counter
from dmlplug import Params
from dmlplug.plugins import get_host
from dmlplug.cli import main

class CountdownParams(Params):
    def metric_names(self):
        return ("countdown",)

class Countdown:
    def __init__(self):
        self.calls = Counter()

    def evaluate(self, ctx):
        self.calls[len(ctx.query_labels)] += 1
        return {"countdown": 1.0 / self.calls[len(ctx.query_labels)]}

get_host().registry.register_callback("evaluators", "test")("countdown", lambda p, c: Countdown(),
                                                            params=CountdownParams)
main(sys.argv[1:])
"""


@pytest.mark.slow
def test_torchrun_reports_the_selected_checkpoint_of_every_rank(tiny_recipe, tmp_path):
    script, run_dir = tmp_path / "countdown.py", tmp_path / "ddp"
    script.write_text(SCRIPT)
    sets = [arg for pair in [*SMALL, *VAL, *EVALUATORS, "backbone.frozen_bn=true"] for arg in ("--set", pair)]
    proc = _torchrun(script, "run", tiny_recipe, "--out", run_dir, "--quiet", *sets, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[:6000]
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["selected_on"], results["reported_on"], results["best_epoch"]) == ("val", "test", 1)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["split"]) for r in records if "report" in r] == [(1, "test")]  # once, by rank 0
    # Had rank 1 embedded its half of the test split with the last weights, these would differ.
    recalls = evaluate_best_on_test(run_dir)
    for key in ("recall@1", "recall@2"):
        assert results["best_metrics"][key] == pytest.approx(recalls[key], abs=1e-9)
