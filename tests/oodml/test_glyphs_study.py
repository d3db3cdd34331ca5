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

from glyphs_oodml_page import fewshot_section, render_from_numbers  # noqa: E402
from glyphs_oodml_reading import degradation, split_count, split_table  # noqa: E402
from glyphs_oodml_stats import (  # noqa: E402
    ags_interval,
    ags_weights,
    change,
    change_difference,
    difference,
    fewshot_gains,
    linear_combination,
    nested_mean,
    spread_range,
    t_quantile,
)

from dmlplug.evaluation.formatting import format_value  # noqa: E402
from dmlplug_builtins.oodml.summary import summarize_sweep  # noqa: E402

PAGE = ROOT / "docs" / "results" / "glyphs-oodml.md"
TINY_METHODS = ["multisimilarity", "arcface_tcm"]
SHRINK = ["run.epochs=1", "data.batch_size=32", "data.dataset.num_classes=40", "data.dataset.images_per_class=8"]


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    """Two methods, two splits, two seeds, two episodes: every step of the real study, in about a minute."""
    study = tmp_path_factory.mktemp("study")
    # --in-process: the study's dmlplug commands share the study's one interpreter (no start-up per command); a
    # second run below goes through new processes, as the published study does.
    command = [sys.executable, str(ROOT / "studies" / "glyphs_oodml.py"), "run", str(study), "--in-process",
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
        # The page says the untrained model is never a candidate for a run's best epoch (few-shot base models).
        assert recipe["evaluation"]["initial"] is False, stem
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


# Student-t critical values t_{0.975, df} from tables.
T1, T2, T4 = 12.706204736, 4.302652730, 2.776445105


def test_t_quantiles_are_the_two_sided_95_percent_critical_values():
    assert t_quantile(1) == pytest.approx(T1) and t_quantile(2) == pytest.approx(T2)
    assert t_quantile(4) == pytest.approx(T4) and t_quantile(1e9) == pytest.approx(1.959964, abs=1e-6)


def test_a_difference_of_two_cells_uses_the_two_cells_spread_and_welch_satterthwaite_freedom():
    # (0.5, 0.7): s² = 0.02, s²/n = 0.01; (0.1, 0.1): 0. SE = √0.01 = 0.1; df = 0.01² / (0.01²/1) = 1.
    gap = linear_combination([(1.0, [0.5, 0.7]), (-1.0, [0.1, 0.1])])
    assert gap.estimate == pytest.approx(0.5) and gap.se == pytest.approx(0.1) and gap.df == pytest.approx(1.0)
    assert gap.half_width == pytest.approx(0.1 * T1) and gap.resolved is False  # 0.5 < 1.2706
    # Both cells with s²/n = 0.01: SE = √0.02, df = 0.02² / (2·0.01²) = 2.
    gap = linear_combination([(1.0, [0.5, 0.7]), (-1.0, [0.2, 0.4])])
    assert gap.se == pytest.approx(math.sqrt(0.02)) and gap.df == pytest.approx(2.0)
    assert gap.half_width == pytest.approx(math.sqrt(0.02) * T2)
    # Unequal counts: (0.1, 0.2, 0.3): s²/n = 0.01/3; (0.5, 0.7): 0.01.
    # df = (4/300)² / ((1/300)²/2 + 0.01²/1) = 32/19.
    gap = linear_combination([(1.0, [0.1, 0.2, 0.3]), (-1.0, [0.5, 0.7])])
    assert gap.estimate == pytest.approx(-0.4) and gap.se == pytest.approx(math.sqrt(0.04 / 3))
    assert gap.df == pytest.approx(32 / 19)
    # A cell of one seed has no spread: no standard error, no verdict.
    lone = linear_combination([(1.0, [0.5]), (-1.0, [0.1, 0.2])])
    assert lone.estimate == pytest.approx(0.35) and lone.se is None and lone.resolved is None
    # Every cell without spread: SE 0, df the smallest Satterthwaite value (min nᵢ − 1).
    flat = linear_combination([(1.0, [0.3, 0.3, 0.3]), (-1.0, [0.1, 0.1])])
    assert flat.se == 0.0 and flat.df == 1.0
    with pytest.raises(ValueError):
        linear_combination([(1.0, [])])


def test_the_change_of_one_method_is_two_split_means_and_a_difference_of_changes_four():
    # Every cell has s² = 0.02 (σ = √0.02) and n = 2.
    data = fake_numbers({"a": [[0.5, 0.7], [0.2, 0.4]], "b": [[0.3, 0.5], [0.2, 0.4]]}, [0.0, 1.0])
    one = change(data, "recall@1", "a", 1, 2)
    assert one.estimate == pytest.approx(-0.3) and one.se == pytest.approx(math.sqrt(0.02) * math.sqrt(2 / 2))
    assert one.df == pytest.approx(2.0)
    both = change_difference(data, "recall@1", "a", "b", 1, 2)
    # (0.3 − 0.6) − (0.3 − 0.4) = −0.2; SE = σ·√(4/n) = √0.02·√2 = 0.2, not σ·√(2/n) = 0.1414; df = 4.
    assert both.estimate == pytest.approx(-0.2) and both.se == pytest.approx(0.2) and both.df == pytest.approx(4.0)
    assert both.half_width == pytest.approx(0.2 * T4)
    on_split = difference(data, "recall@1", 1, "a", "b")
    assert on_split.estimate == pytest.approx(0.2) and on_split.se == pytest.approx(math.sqrt(0.02))
    assert difference(data, "recall@1", 3, "a", "b") is None and change(data, "recall@1", "a", 1, 3) is None
    assert spread_range(data, "recall@1") == (pytest.approx(math.sqrt(0.02)), pytest.approx(math.sqrt(0.02)))


def test_ags_is_a_weighted_sum_of_cell_means_with_the_cells_own_spread():
    # FIDs 0, 1, 3 -> normalised 0, 1/3, 1; trapezoid weights 1/6, (1/3 + 2/3)/2 = 1/2, 1/3.
    assert ags_weights([0.0, 1.0, 3.0]) == pytest.approx([1 / 6, 1 / 2, 1 / 3])
    # Two splits at normalised FID 0 and 1: AGS = (m1 + m2)/2 = (0.6 + 0.1)/2; SE² = 0.25·0.01 + 0.25·0 -> 0.05.
    data = fake_numbers({"a": [[0.5, 0.7], [0.1, 0.1]], "b": [[0.2, 0.4], [0.0, 0.0]]}, [0.0, 1.0])
    own = ags_interval(data, "recall@1", "a")
    assert own.estimate == pytest.approx(0.35) and own.se == pytest.approx(0.05) and own.df == pytest.approx(1.0)
    # AGS a − AGS b = 0.35 − 0.15; SE² = 0.25·0.01 (a, split 1) + 0.25·0.01 (b, split 1) = 0.005; df 2.
    gap = ags_interval(data, "recall@1", "a", "b")
    assert gap.estimate == pytest.approx(0.2) and gap.se == pytest.approx(math.sqrt(0.005))
    assert gap.df == pytest.approx(2.0) and gap.resolved is False  # 0.2 < 4.3027·0.0707 = 0.304
    assert ags_interval(fake_numbers({"a": [[0.5, 0.7]]}, [0.0]), "recall@1", "a") is None


def test_the_reading_judges_each_difference_by_its_own_cells():
    # Split 1: a (0.5, 0.7) vs b (0.1, 0.1): 0.5 ± 12.71·0.1, not resolved although far larger than a pooled
    # σ·√(2/n) = 0.1; split 2: a (0.50, 0.52) vs b (0.10, 0.10): 0.41 ± 12.71·0.01 = 0.127, resolved.
    data = fake_numbers({"a": [[0.5, 0.7], [0.50, 0.52]], "b": [[0.1, 0.1], [0.10, 0.10]]}, [0.0, 1.0])
    table = split_table(data, "recall@1")
    assert table[2] == f"| 1 | a 0.6000 | highest | -0.5000 ± {0.1 * T1:.4f} (df 1.0) |"
    assert table[3] == f"| 2 | a 0.5100 | highest | **-0.4100 ± {0.01 * T1:.4f} (df 1.0)** |"
    assert split_count(data, "recall@1").startswith("1 of the 2 differences from a split's highest method exceed")
    # Changes from split 1 to 2: a −0.09, b 0.0; their difference has SE √(0.01 + 0.0001) over four cells.
    text = "\n".join(degradation(data, "recall@1"))
    se = math.sqrt(0.01 + 0.0001)
    df = (0.01 + 0.0001) ** 2 / (0.01 ** 2 + 0.0001 ** 2)
    assert f"a vs. b -0.0900 ± {t_quantile(df) * se:.4f} (df {df:.1f})" in text and "None of the 1 pairs" in text


def test_a_nested_mean_takes_the_seeds_as_replicates():
    # Seeds agree within, differ between: means 0.11, 0.31; s²_g = 0.02; σ̂²_w = 0.0002, σ̂²_w/e = 0.0001.
    # SE = √(0.02/2) = 0.1, df 1, half-width 12.706·0.1; σ̂²_b = 0.02 − 0.0001.
    g = nested_mean([[0.10, 0.12], [0.30, 0.32]])
    assert g["mean"] == pytest.approx(0.21) and g["group_means"] == pytest.approx([0.11, 0.31])
    assert g["se"] == pytest.approx(0.1) and g["df"] == 1.0 and g["half_width"] == pytest.approx(0.1 * T1)
    assert g["within_var"] == pytest.approx(0.0002) and g["between_var"] == pytest.approx(0.0199)
    # Treating the four values as independent: std = √(0.0404/3), / √4 -> 0.0580, too small.
    assert g["pooled_se"] == pytest.approx(math.sqrt(0.0404 / 3) / 2)
    # Seeds agree exactly, but each seed's mean has episode noise σ̂²_w/e = 0.02/2: SE = √(0.01/2), σ̂²_b = 0.
    g = nested_mean([[0.0, 0.2], [0.2, 0.0]])
    assert g["se"] == pytest.approx(math.sqrt(0.005)) and g["between_var"] == 0.0
    # Unbalanced: σ̂²_w from the seed with 3 values (0.04, 2 df); floor 0.04·mean(1/3, 1) = 0.0267 > s²_g = 0.005.
    g = nested_mean([[0.0, 0.2, 0.4], [0.3]])
    assert g["mean"] == pytest.approx(0.25) and g["within_var"] == pytest.approx(0.04)
    assert g["se"] == pytest.approx(math.sqrt(0.04 * (2 / 3) / 2))
    single = nested_mean([[0.1, 0.3]])
    assert single["se"] is None and single["half_width"] is None and single["mean"] == pytest.approx(0.2)
    with pytest.raises(ValueError):
        nested_mean([[0.1], []])


def fewshot_report(zero, adapted):
    """One seed's ``fewshot.json`` summary for 2-shot recall@1."""
    return {"2": {"zero_shot": {"recall@1": {"values": zero}}, "adapted": {"recall@1": {"values": adapted}}}}


def test_fewshot_gain_is_paired_per_episode_and_nested_in_seeds():
    # Gains: seed 0 (0.10, 0.12), seed 1 (0.30, 0.32): the first case of the nested-mean test.
    reports = {"0": fewshot_report([0.1, 0.1], [0.2, 0.22]), "1": fewshot_report([0.0, 0.0], [0.3, 0.32])}
    g = fewshot_gains(reports, "2", "recall@1")
    assert g["zero_shot"] == pytest.approx(0.05) and g["adapted"] == pytest.approx(0.26)
    assert g["gain"]["mean"] == pytest.approx(0.21) and g["gain"]["se"] == pytest.approx(0.1)
    assert g["gain"]["df"] == 1.0 and g["gain"]["values"] == 4
    assert fewshot_gains(reports, "5", "recall@1") is None
    with pytest.raises(ValueError):
        fewshot_gains({"0": fewshot_report([0.1, 0.1], [0.2])}, "2", "recall@1")


def test_the_fewshot_section_says_what_one_degree_of_freedom_means():
    reports = {"0": fewshot_report([0.1, 0.1], [0.2, 0.22]), "1": fewshot_report([0.0, 0.0], [0.3, 0.32])}
    data = {"settings": {"shots": [2], "seeds": [0, 1], "episodes": 2}, "most_shifted": 2,
            "protocol": {"epochs": 3, "initial_evaluation": False}, "fewshot": {"a": reports},
            "methods": {"a": {"name": "A"}}}
    text = "\n".join(fewshot_section(data))
    assert f"| A | 0.0500 | 0.2600 | +0.2100 ± {0.1 * T1:.4f} (seeds +0.1100, +0.3100) |" in text
    assert "**1 degree of freedom**: t = 12.71" in text and "Not resolved: A 2-shot (+0.2100)" in text
    assert "the selected epoch is always a trained one" in text


def test_the_committed_fewshot_gains_are_nested_in_seeds():
    # The audit's case: Multi-Similarity 2-shot recall@1, per-seed gains +0.015 and +0.053. By hand: the seeds'
    # spread (|g1 − g2|/2) exceeds the episode floor, so the half-width is 12.706·|g1 − g2|/2 and the gain is
    # not resolved.
    numbers = json.loads(PAGE.with_suffix(".json").read_text())
    seeds = numbers["fewshot"]["multisimilarity"]
    gains = [float(np.mean(np.subtract(seeds[s]["2"]["adapted"]["recall@1"]["values"],
                                       seeds[s]["2"]["zero_shot"]["recall@1"]["values"]))) for s in ("0", "1")]
    assert gains == pytest.approx([0.0154, 0.0529], abs=1e-4)
    half = T1 * abs(gains[0] - gains[1]) / 2
    cell = f"{np.mean(gains):+.4f} ± {half:.4f} (seeds {gains[0]:+.4f}, {gains[1]:+.4f})"
    text = PAGE.read_text()
    assert f"| Multi-Similarity | 0.2162 | 0.2504 | {cell} |" in text and f"**{cell.split(' (')[0]}**" not in text
    verdict = text.split("recall@1 gains that exceed the noise:")[1].split("\n")[0]
    assert "Multi-Similarity 2-shot (+0.0342)" in verdict.split("Not resolved:")[1]


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
