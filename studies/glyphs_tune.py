"""The tuned glyph study: the five ooDML study methods, each tuned with the same budget (docs/results/glyphs-tune.md).

Two commands, each resumable::

    python studies/glyphs_tune.py run study        # five searches + reproductions (~90 min on a quiet 2-core CPU)
    python studies/glyphs_tune.py page study       # regenerate docs/results/glyphs-tune.md from the directories
    python studies/glyphs_tune.py page --from-numbers   # the same from the committed .json (no study directory)

``run`` only issues ``dmlplug`` commands (printed, and logged with their wall time and the machine's load in
``OUT/study.json``), per method in ``METHODS`` order:

1. ``dmlplug tune run recipes/tune/study/METHOD.space.toml --dir OUT/tunes/METHOD --trials T --reproductions R
   --set run.epochs=E``: the Reality-Check protocol (4 class-disjoint folds of the training classes, TPE,
   median pruning on the running fold mean), then the best configuration retrained on all training classes
   with seeds ``0 .. R-1`` and evaluated on the test classes. Every method gets the same budget: ``T`` trials
   × 4 folds × ``E`` epochs (pruning may spend less).
2. ``dmlplug run recipes/study/METHOD.toml --set run.seed=S --set run.epochs=E`` for the same seeds: the untuned
   recipe under the very protocol of the reproductions (same data, epochs, seeds; the final model's test
   metric), so tuned and untuned differ in the configuration only.

A finished step is skipped (a search that has its trials and reproductions, an untuned run that completed), so
an interrupted study continues where it stopped. ``page`` collects the numbers (:mod:`glyphs_tune_page`), keeps
them beside the page as JSON, and renders the page from them; it compares with the untuned ooDML study's
committed numbers (docs/results/glyphs-oodml.json) as well.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from glyphs_oodml import METHODS, ROOT, Study, completed, sets  # noqa: E402

SPACES = ROOT / "recipes" / "tune" / "study"
RECIPES = ROOT / "recipes" / "study"
LOG = "study.json"
#: The budget of every method (its sizing: docs/tune.md, "The five built-in methods tuned with one budget").
TRIALS = 24
EPOCHS = 3
REPRODUCTIONS = 3


@dataclass
class TuneSettings:
    """What the study runs; the defaults are the published study, tests shrink them."""

    out: Path
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    trials: int = TRIALS
    epochs: int = EPOCHS
    reproductions: int = REPRODUCTIONS
    #: ``--set`` overrides of every run (searches, reproductions and untuned runs alike).
    overrides: list[str] = field(default_factory=list)
    #: Run each ``dmlplug`` command in this interpreter (glyphs_oodml.run_in_process; not recorded).
    in_process: bool = False

    def to_json(self) -> dict:
        """The settings as recorded in ``OUT/study.json``."""
        return {"methods": self.methods, "trials": self.trials, "epochs": self.epochs,
                "reproductions": self.reproductions, "overrides": self.overrides}

    def run_overrides(self) -> list[str]:
        """The overrides of every run: the study's epochs, then the user's."""
        return [f"run.epochs={self.epochs}", *self.overrides]


class TuneStudy:
    """Runs the searches and the untuned runs, logging every command with its wall time to ``OUT/study.json``."""

    def __init__(self, settings: TuneSettings):
        self.settings = settings
        self.out = settings.out
        self.log_path = self.out / LOG
        self.log = json.loads(self.log_path.read_text()) if self.log_path.is_file() else {"commands": []}
        recorded = self.log.get("settings")
        if recorded is not None and recorded != settings.to_json():
            raise SystemExit(f"{self.out} holds a study with other settings ({recorded}); use a new directory")

    def tune_dir(self, method: str) -> Path:
        """The tune directory of ``method``."""
        return self.out / "tunes" / method

    def untuned(self, method: str, seed: int) -> Path:
        """The untuned run of ``method`` with ``seed``."""
        return self.out / "untuned" / method / f"seed-{seed}"

    # Commands run and logged as in the ooDML study (the same attributes: out, log, log_path, settings).
    dmlplug = Study.dmlplug
    save_log = Study.save_log

    def searched(self, method: str) -> bool:
        """Whether the search of ``method`` has its reproductions (so its trials too)."""
        summary = self.tune_dir(method) / "reproductions" / "summary.json"
        return summary.is_file() and len(json.loads(summary.read_text())["scores"]) == self.settings.reproductions

    def run(self) -> None:
        """Every step, skipping those whose results exist."""
        s = self.settings
        self.save_log()
        for method in s.methods:
            if not self.searched(method):
                self.dmlplug(f"tune {method}", "tune", "run", SPACES / f"{method}.space.toml",
                             "--dir", self.tune_dir(method), "--trials", s.trials,
                             "--reproductions", s.reproductions, *sets(s.run_overrides()))
            for seed in range(s.reproductions):
                run_dir = self.untuned(method, seed)
                if completed(run_dir):
                    continue
                if run_dir.exists():  # a run stopped mid-way starts again (dmlplug run wants a new --out)
                    shutil.rmtree(run_dir)
                self.dmlplug(f"untuned {method} seed {seed}", "run", RECIPES / f"{method}.toml", "--out", run_dir,
                             "--quiet", *sets([*s.run_overrides(), f"run.seed={seed}"]))


def main(argv: list[str] | None = None) -> None:
    """The command line: ``run OUT`` or ``page OUT``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run (or continue) the study")
    run.add_argument("out", type=Path, help="study directory")
    run.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    run.add_argument("--trials", type=int, default=TRIALS, help="trials of every search")
    run.add_argument("--epochs", type=int, default=EPOCHS, help="epochs of every run")
    run.add_argument("--reproductions", type=int, default=REPRODUCTIONS,
                     help="seeds of the tuned and the untuned test runs")
    run.add_argument("--set", dest="overrides", action="append", default=[], help="override of every run")
    run.add_argument("--in-process", action="store_true",
                     help="run the dmlplug commands in this interpreter (one start-up for all; the tests use it)")
    page = commands.add_parser("page", help="regenerate the results page from a study directory")
    page.add_argument("out", type=Path, nargs="?", help="study directory")
    page.add_argument("--page", type=Path, default=ROOT / "docs" / "results" / "glyphs-tune.md")
    page.add_argument("--oodml", type=Path, default=ROOT / "docs" / "results" / "glyphs-oodml.json",
                      help="the untuned ooDML study's numbers")
    page.add_argument("--from-numbers", action="store_true",
                      help="render the page again from the numbers kept beside it (its .json)")
    args = parser.parse_args(argv)
    if args.command == "page" and (args.out is None) != args.from_numbers:
        parser.error("page needs a study directory, or --from-numbers without one")
    if args.command == "run":
        if min(args.trials, args.epochs, args.reproductions) < 1:
            parser.error("--trials, --epochs and --reproductions must be at least 1")
        TuneStudy(TuneSettings(args.out, methods=args.methods, trials=args.trials, epochs=args.epochs,
                               reproductions=args.reproductions, overrides=args.overrides,
                               in_process=args.in_process)).run()
    elif args.from_numbers:
        from glyphs_tune_page import write_page_from_numbers

        print(f"wrote {write_page_from_numbers(args.page)}")
    else:
        from glyphs_tune_page import write_page

        print(f"wrote {', '.join(map(str, write_page(args.out, args.page, args.oodml)))}")


if __name__ == "__main__":
    main()
