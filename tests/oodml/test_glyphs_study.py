"""The glyph ooDML study (studies/glyphs_oodml.py): a tiny study run end to end, its page checked against
`dmlplug oodml summarize`'s own numbers, the noise arithmetic against hand-computed values, and the committed
page against the numbers committed beside it."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from e2e import ROOT

sys.path.insert(0, str(ROOT / "studies"))

from glyphs_oodml_page import render_from_numbers  # noqa: E402
from glyphs_oodml_stats import fewshot_gains, noise  # noqa: E402

from dmlplug.evaluation.formatting import format_value  # noqa: E402
from dmlplug_builtins.oodml.summary import summarize_sweep  # noqa: E402

PAGE = ROOT / "docs" / "results" / "glyphs-oodml.md"
TINY_METHODS = ["multisimilarity", "arcface_tcm"]
SHRINK = ["run.epochs=1", "data.batch_size=32", "data.dataset.num_classes=40", "data.dataset.images_per_class=8"]


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    """Two methods, two splits, two seeds, two episodes: every step of the real study, in about a minute."""
    study = tmp_path_factory.mktemp("study")
    command = [sys.executable, str(ROOT / "studies" / "glyphs_oodml.py"), "run", str(study),
               "--methods", *TINY_METHODS, "--seeds", "0", "1", "--num-splits", "2", "--episodes", "2",
               *(f"--set={s}" for s in SHRINK), *(f"--extractor-set={s}" for s in SHRINK),
               "--extractor-set=evaluation.every=1", "--split-option=--iterations", "--split-option=3",
               "--fewshot-option=--iterations", "--fewshot-option=2=3,5=3"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    page = study / "page.md"
    result = subprocess.run([sys.executable, str(ROOT / "studies" / "glyphs_oodml.py"), "page", str(study),
                             "--page", str(page)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return study, page


def table_rows(page_text, heading):
    """``{first cell: [other cells]}`` of the first Markdown table after ``heading``."""
    section = page_text.split(heading, 1)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if set(cells[0]) <= {"-"} or cells[0] == "method":
            continue
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_the_page_table_is_what_summarize_computes_from_the_sweeps(tiny_study):
    study, page = tiny_study
    text = page.read_text()
    splits = json.loads((study / "splits.json").read_text())["splits"]
    names = {"multisimilarity": "Multi-Similarity", "arcface_tcm": "ArcFace + TCM"}
    for metric in ("recall@1", "map@1000"):
        rows = table_rows(text, f"### {metric}")
        assert set(rows) == set(names.values())
        for stem, name in names.items():
            summary = summarize_sweep(study / "sweeps" / stem, metrics=["recall@1", "map@1000"])
            by_id = {row.split_id: row for row in summary.rows}
            expected = [by_id[s["id"]].cell(metric) for s in splits] + [format_value(summary.ags[metric])]
            assert rows[name] == expected
            assert all("±" in cell for cell in rows[name][:-1])  # two seeds: every cell has its spread


@pytest.mark.slow
def test_the_page_reports_fewshot_commands_and_figure_and_renders_again_from_its_numbers(tiny_study):
    study, page = tiny_study
    text = page.read_text()
    for metric in ("recall@1", "map@1000"):
        rows = table_rows(text, f"**{metric}**")
        assert set(rows) == {"Multi-Similarity", "ArcFace + TCM"}
        assert all(len(cells) == 6 and "–" not in cells for cells in rows.values())
    assert "`dmlplug oodml run recipes/study/arcface_tcm.toml --splits STUDY/splits.json" in text
    assert "`dmlplug oodml splits --dataset glyphs" in text and "--extractor-run STUDY/extractor" in text
    assert page.with_suffix(".png").stat().st_size > 5000
    assert render_from_numbers(page) == text
    # The split table lists what the split file holds.
    splits = json.loads((study / "splits.json").read_text())["splits"]
    assert table_rows(text, "| split | FID |") == {
        str(s["id"]): [f"{s['fid']:.2f}", str(len(s["train"])), str(len(s["test"])), s["generator_key"]]
        for s in splits}


@pytest.mark.slow
def test_a_second_run_of_the_study_trains_nothing(tiny_study):
    study, _ = tiny_study
    before = json.loads((study / "study.json").read_text())["commands"]
    result = subprocess.run([sys.executable, str(ROOT / "studies" / "glyphs_oodml.py"), "run", str(study),
                             "--methods", *TINY_METHODS, "--seeds", "0", "1", "--num-splits", "2", "--episodes",
                             "2", *(f"--set={s}" for s in SHRINK)], capture_output=True, text=True, timeout=600,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("0 run(s) trained") == 2 * len(TINY_METHODS)
    after = json.loads((study / "study.json").read_text())["commands"]
    steps = [c["step"] for c in after[len(before):]]
    assert not [s for s in steps if s in ("extractor", "splits") or s.startswith("few-shot ") and "seed" in s]


def test_the_study_recipes_differ_only_in_the_method():
    import tomllib

    from glyphs_oodml import METHODS, RECIPES

    shared = ("data", "backbone", "evaluation", "evaluators", "loggers")
    recipes = {stem: tomllib.loads((RECIPES / f"{stem}.toml").read_text()) for stem in METHODS}
    base = recipes["multisimilarity"]
    for stem, recipe in recipes.items():
        assert {k: recipe[k] for k in shared if k != "evaluators"} == {k: base[k] for k in shared
                                                                      if k != "evaluators"}, stem
        assert recipe["evaluators"][:2] == base["evaluators"], stem  # ArcFace + TCM adds OPIS after them
        assert {k: v for k, v in recipe["run"].items() if k != "name"} == \
            {k: v for k, v in base["run"].items() if k != "name"}
        embedding = recipe["head"].get("embedding_size") or sum(recipe["head"]["heads"].values())
        assert embedding == 64 and {k: recipe["optimizer"][k] for k in ("name", "lr", "weight_decay")} == \
            {k: base["optimizer"][k] for k in ("name", "lr", "weight_decay")}
    extractor = tomllib.loads((RECIPES / "extractor.toml").read_text())["data"]["dataset"]["families"]
    assert not set(extractor) & set(base["data"]["dataset"]["families"])


class FirstCommandOnly(Exception):
    pass


def test_an_interrupted_extractor_resumes_from_its_checkpoint_or_starts_again(tmp_path):
    from glyphs_oodml import Study, StudySettings

    class Recording(Study):
        def dmlplug(self, step, *args):
            self.issued = [str(a) for a in args]
            raise FirstCommandOnly

    extractor = tmp_path / "extractor"
    (extractor / "checkpoints").mkdir(parents=True)
    (extractor / "results.json").write_text('{"status": "interrupted"}')
    (extractor / "checkpoints" / "last.pt").write_bytes(b"checkpoint")
    study = Recording(StudySettings(tmp_path))
    with pytest.raises(FirstCommandOnly):
        study.run()
    assert study.issued[-1] == "--resume" and extractor.is_dir()
    (extractor / "checkpoints" / "last.pt").unlink()  # stopped before its first checkpoint
    with pytest.raises(FirstCommandOnly):
        study.run()
    assert "--resume" not in study.issued and not extractor.exists()


def fake_numbers(cells, fids):
    """Numbers in the page's layout: ``cells[method] = [per-split seed values]``."""
    methods = {}
    for stem, per_split in cells.items():
        rows = [{"id": i + 1, "values": {"recall@1": values}, "mean": {"recall@1": float(np.mean(values))},
                 "std": {"recall@1": float(np.std(values, ddof=1)) if len(values) > 1 else None}}
                for i, values in enumerate(per_split)]
        methods[stem] = {"name": stem, "summary": {"splits": rows, "ags": {}}}
    return {"settings": {"seeds": [0, 1]}, "splits": [{"id": i + 1, "fid": f} for i, f in enumerate(fids)],
            "methods": methods}


def test_noise_is_the_pooled_seed_deviation_and_its_standard_errors():
    # Cells (0.5, 0.7): variance 0.02; (0.1, 0.1): 0 -> pooled variance 0.01, sigma 0.1, 2 degrees of freedom.
    data = fake_numbers({"a": [[0.5, 0.7]], "b": [[0.1, 0.1]]}, [0.0])
    data["splits"] = [{"id": 1, "fid": 0.0}, {"id": 2, "fid": 1.0}]
    n = noise(data, "recall@1")
    assert n["sigma"] == pytest.approx(0.1) and n["freedom"] == 2
    assert n["difference_se"] == pytest.approx(0.1)  # sigma * sqrt(2 / 2 seeds)
    # Two splits at normalised FID 0 and 1: AGS = (m1 + m2) / 2, weights 1/2 -> se = sigma/sqrt(2) * sqrt(1/2).
    assert n["ags_se"] == pytest.approx(0.05) and n["ags_difference_se"] == pytest.approx(0.05 * math.sqrt(2))
    assert noise(fake_numbers({"a": [[0.5]], "b": [[0.2]]}, [0.0]), "recall@1")["sigma"] is None


def test_fewshot_gain_is_paired_over_seeds_and_episodes():
    report = {"2": {"zero_shot": {"recall@1": {"values": [0.1]}}, "adapted": {"recall@1": {"values": [0.3]}}}}
    other = {"2": {"zero_shot": {"recall@1": {"values": [0.2]}}, "adapted": {"recall@1": {"values": [0.3]}}}}
    g = fewshot_gains({"0": report, "1": other}, "2", "recall@1")
    assert g["gain"] == pytest.approx(0.15) and g["samples"] == 2
    assert g["gain_se"] == pytest.approx(np.std([0.2, 0.1], ddof=1) / math.sqrt(2))
    assert fewshot_gains({"0": report}, "5", "recall@1") is None


def test_the_committed_page_is_rendered_from_the_committed_numbers_of_the_full_study():
    numbers = json.loads(PAGE.with_suffix(".json").read_text())
    settings = numbers["settings"]
    # The published study, not a shrunken one: five methods, at least five splits and two seeds, no overrides.
    assert len(settings["methods"]) == 5 and len(numbers["splits"]) >= 5 and len(settings["seeds"]) >= 2
    assert settings["overrides"] == [] and settings["extractor_overrides"] == []
    assert all(c["exit"] == 0 for c in numbers["commands"])
    assert render_from_numbers(PAGE) == PAGE.read_text()
    assert PAGE.with_suffix(".png").stat().st_size > 5000
    assert re.search(r"Total wall time \d+\.\d min", PAGE.read_text())
