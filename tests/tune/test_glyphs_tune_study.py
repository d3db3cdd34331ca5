"""The tuned glyph study (studies/glyphs_tune.py): run end to end at toy size, its page checked against the tune
directories' own numbers, a second run trains nothing; the page's intervals and ranking verdicts against
hand-computed values; the study's space files validate."""

import json
import math
import statistics
import subprocess
import sys

import pytest
from e2e import ROOT
from scipy import stats

sys.path.insert(0, str(ROOT / "studies"))

from glyphs_tune_page import difference, order_change, reading, render_from_numbers  # noqa: E402

from dmlplug.evaluation.formatting import format_value  # noqa: E402

METHODS = ["multisimilarity", "arcface_tcm"]
NAMES = {"multisimilarity": "Multi-Similarity", "arcface_tcm": "ArcFace + TCM"}
TOY = ["--trials", "1", "--epochs", "1", "--reproductions", "2", "--set=data.dataset.num_classes=24",
       "--set=data.dataset.images_per_class=4", "--set=data.batch_size=16", "--set=data.image_size=16"]


def study_command(*args):
    return subprocess.run([sys.executable, str(ROOT / "studies" / "glyphs_tune.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)


@pytest.fixture(scope="module")
def toy_study(tmp_path_factory):
    """Two methods, one trial of 4 folds, one epoch, two seeds, 24 tiny classes: every step of the real study."""
    study = tmp_path_factory.mktemp("study")
    # --in-process: the study's dmlplug commands share one interpreter; the second run below starts a process each.
    result = study_command("run", study, "--in-process", "--methods", *METHODS, *TOY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    page = study / "page.md"
    result = study_command("page", study, "--page", page)
    assert result.returncode == 0, result.stderr[-3000:]
    return study, page


def rows_after(text, heading):
    section = text.split(heading, 1)[1]
    rows = {}
    for line in section.splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if set(cells[0]) <= {"-"} or cells[0] in ("method", "rank"):
            continue
        rows[cells[0]] = cells[1:]
    return rows


def ci(values):
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return f"{format_value(statistics.fmean(values))} ± {format_value(half)}"


@pytest.mark.slow
def test_the_page_is_the_tune_directories_numbers(toy_study):
    study, page = toy_study
    text = page.read_text()
    rows = rows_after(text, "## Results")
    assert set(rows) == set(NAMES.values())
    means = {}
    for stem, name in NAMES.items():
        summary = json.loads((study / "tunes" / stem / "reproductions" / "summary.json").read_text())
        untuned = [json.loads((study / "untuned" / stem / f"seed-{s}" / "results.json").read_text())
                   ["metrics"]["recall@1"] for s in range(2)]
        folds = [json.loads((study / "tunes" / stem / "trials" / "trial-0000" / f"fold-{i}" / "results.json")
                            .read_text()) for i in range(4)]
        best_cv = statistics.fmean(f["selection_metrics"]["recall@1"] for f in folds)  # the only trial
        assert rows[name] == ["1 / 0 / 0", "4", format_value(best_cv), ci(summary["scores"]), ci(untuned),
                              rows[name][5]]
        gap = statistics.fmean(summary["scores"]) - statistics.fmean(untuned)
        assert rows[name][5].strip("*").startswith(f"{gap:+.4f}")
        means[stem] = statistics.fmean(summary["scores"])
    order = sorted(NAMES, key=lambda s: -means[s])
    ranks = rows_after(text, "## Rankings")
    assert [ranks[str(i + 1)][0] for i in range(2)] == [NAMES[s] for s in order]
    oodml = json.loads((ROOT / "docs" / "results" / "glyphs-oodml.json").read_text())["methods"]
    ags = sorted(NAMES, key=lambda s: -oodml[s]["summary"]["ags"]["recall@1"])
    assert [ranks[str(i + 1)][2] for i in range(2)] == [NAMES[s] for s in ags]
    assert "## What this budget can and cannot resolve" in text and "t = 12.71 (1 df)" in text
    commands = rows_after(text, "## Commands and wall times")
    assert "tune multisimilarity" in commands and "untuned arcface_tcm seed 1" in commands
    assert render_from_numbers(page) == text


@pytest.mark.slow
def test_a_second_run_of_the_study_trains_nothing(toy_study):
    study, _ = toy_study
    before = json.loads((study / "study.json").read_text())["commands"]
    result = study_command("run", study, "--methods", *METHODS, *TOY)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((study / "study.json").read_text())["commands"] == before
    refused = study_command("run", study, "--methods", *METHODS, *TOY[:-1])  # other settings: another study
    assert refused.returncode != 0 and "holds a study with other settings" in refused.stderr


def methods(**scores):
    return {stem: {"name": stem, "tuned": tuned, "untuned": untuned, "fold_epochs": 8, "best_trial": 0,
                   "space": {"a": "[0, 1]"}} for stem, (tuned, untuned) in scores.items()}


def test_verdicts_against_hand_computed_intervals():
    m = methods(a=([0.50, 0.52, 0.51], [0.40, 0.41, 0.42]), b=([0.30, 0.60, 0.45], [0.45, 0.46, 0.44]))
    # a: tuned - untuned = 0.10, s = 0.01 in both cells: SE = sqrt(2 * 0.0001 / 3), df = 4 (Welch, equal spread).
    gap = difference(m["a"]["tuned"], m["a"]["untuned"])
    assert gap.estimate == pytest.approx(0.10) and gap.df == pytest.approx(4.0)
    assert gap.half_width == pytest.approx(stats.t.ppf(0.975, 4) * math.sqrt(2 * 1e-4 / 3)) and gap.resolved
    gains = {stem: difference(v["tuned"], v["untuned"]) for stem, v in m.items()}
    data = {"settings": {"reproductions": 3, "trials": 4, "epochs": 2},
            "protocol": {"folds": 4, "sampler": "tpe", "tpe_startup_trials": 10}, "methods": m}
    text = reading(data, gains)[-1]
    assert "t = 4.30 (2 df)" in text and "1 of 2 differences exclude zero (a +0.1000)" in text
    assert "with 4 trials every search here is a random search" in text  # TPE's 10 random start-up trials
    data["protocol"]["tpe_startup_trials"] = 3
    assert "its model chooses only the last 1 trial of each search" in reading(data, gains)[-1]
    assert "not resolved: b" in text and "1 of 1 pairs have overlapping" in text and "cannot order a and b" in text
    # Untuned, b was above a; tuned, a is above b: one swapped pair, not resolved (b's seeds spread 0.15).
    sentence = order_change("untuned", ["b", "a"], ["a", "b"], {"a": "a", "b": "b"}, m)
    assert sentence.startswith("Against untuned, tuning swaps 1 of 1 pairs: a now above b (+0.0600 ± ")
    assert sentence.endswith("not resolved by the seeds).")
    assert order_change("untuned", ["a", "b"], ["a", "b"], {}, m) == "Tuning keeps the order of untuned."


@pytest.mark.parametrize("stem", ["multisimilarity", "arcface_tcm", "proxyanchor_nir", "s2sd", "margin_diva"])
def test_the_study_spaces_validate(stem):
    result = subprocess.run([sys.executable, "-m", "dmlplug", "validate",
                             str(ROOT / "recipes" / "tune" / "study" / f"{stem}.space.toml")],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0 and "search space of 3 parameters" in result.stdout, result.stderr
