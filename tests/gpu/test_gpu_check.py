"""The prepared GPU check (benchmarks/gpu_check.py): its runner (bounds, statuses, budget, report) and its
--dry-run-cpu mode end to end, every step at toy size on the CPU, so the GPU session spends no minute debugging."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402
from gpu_steps import STEPS, Step  # noqa: E402


def _ctx(tmp_path):
    return gpu_check.Context(dry=True, out=tmp_path, work=tmp_path / "work")


def test_a_step_past_its_bound_is_killed_and_reported_as_timeout(tmp_path):
    def sleeper(ctx):
        ctx.run(["python", "-c", "import time; print('started', flush=True); time.sleep(60)"], log="sleep.log")

    record = gpu_check.run_step(Step("slow", "sleeps", 1, 1, sleeper), _ctx(tmp_path), bound=1.5)
    assert record["status"] == "timeout" and record["seconds"] < 10
    assert "started" in record["output_tail"] and "started" in (tmp_path / "work" / "logs" / "sleep.log").read_text()


def test_failed_skipped_and_broken_steps_are_recorded_not_raised(tmp_path):
    def fails(ctx):
        ctx.run(["python", "-c", "import sys; print('boom'); sys.exit(3)"])

    def skips(ctx):
        raise gpu_check.StepSkipped("no faiss-gpu here")

    def broken(ctx):
        return {}["missing"]

    def fine(ctx):
        return {"value": 1}

    records = [gpu_check.run_step(Step(fn.__name__, "", 30, 30, fn), _ctx(tmp_path), bound=30)
               for fn in (fails, skips, broken, fine)]
    assert [r["status"] for r in records] == ["failed", "skipped", "failed", "ok"]
    assert "exit status 3" in records[0]["reason"] and "boom" in records[0]["output_tail"]
    assert records[1]["reason"] == "no faiss-gpu here" and "KeyError" in records[2]["reason"]
    assert records[3]["numbers"] == {"value": 1}


def test_a_spent_budget_skips_the_remaining_steps_and_still_writes_the_report(tmp_path):
    assert gpu_check.main([str(tmp_path), "--dry-run-cpu", "--steps", "doctor,knn", "--budget-s", "5"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in report["steps"]] == [("doctor", "skipped"), ("knn", "skipped")]
    assert "budget" in report["steps"][0]["reason"]
    assert "| doctor | skipped |" in (tmp_path / "report.md").read_text()


def test_unknown_step_names_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_check.main([str(tmp_path), "--steps", "doctor,nope"])
    assert "nope" in capsys.readouterr().err


@pytest.mark.slow
def test_the_dry_run_runs_every_step_on_the_cpu(tmp_path):
    out = tmp_path / "report"
    # The dry-run bounds leave room on a 2-core machine; one busier than that is slower, and the bounds are not what
    # this test is about (the runner's own tests above check them).
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), str(out), "--dry-run-cpu",
                           "--bound-scale", "3"], capture_output=True, text=True, cwd=tmp_path)
    report = json.loads((out / "report.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == [s.name for s in STEPS]
    problems = {n: (s["status"], s.get("reason")) for n, s in steps.items() if s["status"] != "ok"}
    # faiss-cpu is what CI has: the faiss-gpu step says so and is skipped.
    assert problems == {"faiss_gpu": ("skipped", steps["faiss_gpu"].get("reason"))}, done.stdout
    assert done.returncode == 0, done.stdout
    sop = steps["sop_run"]["numbers"]
    assert sop["steps"] == 3 and sop["tcm_term"] and sop["opis"] is not None and sop["images_per_s"] > 0
    assert steps["sop_data"]["numbers"]["images"] == 24 * 5
    assert steps["knn"]["numbers"]["identical"] is True
    assert steps["deterministic"]["numbers"]["identical_weights"] is True
    assert steps["resume"]["numbers"]["identical_weights"] and steps["resume"]["numbers"]["identical_results"]
    assert steps["ddp"]["numbers"]["status"] == "completed"
    assert steps["pytest"]["numbers"]["passed"] > 0 and (out / "pytest.log").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["pytest.log", "report.json", "report.md", "work"]
