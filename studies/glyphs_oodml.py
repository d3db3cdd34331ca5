"""The ooDML characterisation study on the embedded glyph dataset (docs/results/glyphs-oodml.md).

Two commands, each resumable::

    python studies/glyphs_oodml.py run study      # extractor, splits, five sweeps, few-shot (hours on 2 cores)
    python studies/glyphs_oodml.py page study     # regenerate docs/results/glyphs-oodml.md and its figure
    python studies/glyphs_oodml.py page --from-numbers   # the same from the committed .json (no study directory)

``run`` only issues ``dmlplug`` commands (printed, and logged with their wall time in ``OUT/study.json``):

1. ``dmlplug run recipes/study/extractor.toml``: a feature extractor trained on glyph families that no study
   recipe uses (the study's stand-in for ooDML's ImageNet features: nothing is downloaded).
2. ``dmlplug oodml splits --extractor-run``: splits of the study dataset (the ``[data.dataset]`` of the
   baseline recipe) from that extractor's features, least to most shifted.
3. per method, ``dmlplug oodml run`` on every split and seed, then ``dmlplug oodml summarize``.
4. few-shot on the most shifted split: per method a ``--part few_shot_base`` sweep (train on ``split_train``,
   select on ``split_val``), then ``dmlplug fewshot`` on each of its runs.

A step whose result exists is skipped, so an interrupted study continues where it stopped. ``page`` reads the
directories (through the same functions as ``dmlplug oodml summarize``), writes the numbers to
``<page>.json`` and renders the page and its figure from them (:mod:`glyphs_oodml_page`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes" / "study"
#: Study recipe stem -> the method's name in tables, in table order.
METHODS = {
    "multisimilarity": "Multi-Similarity",
    "arcface_tcm": "ArcFace + TCM",
    "proxyanchor_nir": "ProxyAnchor + NIR",
    "s2sd": "Multi-Similarity + S2SD",
    "margin_diva": "Margin + DiVA",
}
LOG = "study.json"


@dataclass
class StudySettings:
    """What a study runs; the defaults are the published study, tests shrink them through the overrides."""

    out: Path
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    num_splits: int = 5
    shots: list[int] = field(default_factory=lambda: [2, 5])
    episodes: int = 10
    #: ``--set`` overrides of every study run (not the extractor).
    overrides: list[str] = field(default_factory=list)
    #: ``--set`` overrides of the extractor run.
    extractor_overrides: list[str] = field(default_factory=list)
    #: Extra options of ``dmlplug oodml splits`` (e.g. ``["--iterations", "3"]``).
    split_options: list[str] = field(default_factory=list)
    #: Extra options of ``dmlplug fewshot`` (e.g. ``["--iterations", "2=5,5=5"]``).
    fewshot_options: list[str] = field(default_factory=list)
    #: Run each ``dmlplug`` command in this interpreter instead of a new one (not recorded: it changes only how
    #: the commands start, not what they compute).
    in_process: bool = False

    def to_json(self) -> dict:
        """The settings as recorded in ``OUT/study.json``."""
        return {"methods": self.methods, "seeds": self.seeds, "num_splits": self.num_splits, "shots": self.shots,
                "episodes": self.episodes, "overrides": self.overrides,
                "extractor_overrides": self.extractor_overrides, "split_options": self.split_options,
                "fewshot_options": self.fewshot_options}


def run_in_process(args: list[str]) -> int:
    """``dmlplug ARGS`` through the command line's own entry point, in this interpreter, from the repository root.

    What ``--in-process`` uses (the tests of the studies): every command then shares one interpreter's start-up
    (Python, torch, timm, the plugins: seconds per command on a 2-core CPU) instead of paying it again.

    Returns:
        The command's exit status.
    """
    from importlib.metadata import entry_points

    # The installed `dmlplug` console script's own entry point: the function the shell command calls.
    (script,) = entry_points(group="console_scripts", name="dmlplug")
    dmlplug_main = script.load()
    previous = Path.cwd()
    os.chdir(ROOT)
    try:
        dmlplug_main(args)
    except SystemExit as stopped:
        return stopped.code if isinstance(stopped.code, int) else int(stopped.code is not None)
    finally:
        os.chdir(previous)
    return 0


def sets(overrides: list[str]) -> list[str]:
    """``["a=1"]`` -> ``["--set", "a=1"]``."""
    return [item for text in overrides for item in ("--set", text)]


def split_dataset_options(settings: StudySettings) -> list[str]:
    """``--dataset``/``--set`` options of ``oodml splits``: the baseline recipe's dataset, overrides applied.

    Taken from the validated recipe, so the split file names exactly the classes the study runs train on.
    """
    import dmlplug

    recipe = dmlplug.validate(RECIPES / f"{settings.methods[0]}.toml", list(settings.overrides))
    table = dict(recipe.resolved()["data"]["dataset"])
    options = ["--dataset", table.pop("name")]
    for key, value in table.items():
        if value is not None:
            options += ["--set", f"dataset.{key}={json.dumps(value)}"]
    return options


class Study:
    """Runs the steps of a study and logs every command with its wall time to ``OUT/study.json``."""

    def __init__(self, settings: StudySettings):
        self.settings = settings
        self.out = settings.out
        self.log_path = self.out / LOG
        self.log = json.loads(self.log_path.read_text()) if self.log_path.is_file() else {"commands": []}

    # ------------------------------------------------------------------------------------------------ paths
    @property
    def extractor(self) -> Path:
        """The extractor's run directory."""
        return self.out / "extractor"

    @property
    def splits(self) -> Path:
        """The split file."""
        return self.out / "splits.json"

    def sweep(self, method: str) -> Path:
        """The zero-shot sweep of ``method``."""
        return self.out / "sweeps" / method

    def fewshot_sweep(self, method: str) -> Path:
        """The few-shot base sweep of ``method`` (the most shifted split only)."""
        return self.out / "fewshot" / method

    # -------------------------------------------------------------------------------------------- commands
    def dmlplug(self, step: str, *args: str | Path | int) -> None:
        """Run ``dmlplug ARGS`` from the repository root, echo it, and log its wall time; stop on failure.

        The log also keeps the machine's load average when the command ends: the wall times are only
        comparable between commands that ran on an otherwise idle machine.
        """
        command = ["dmlplug", *map(relative, args)]
        print(f"$ {shlex.join(command)}", flush=True)
        started = time.time()
        code = run_in_process(command[1:]) if self.settings.in_process else subprocess.run(
            [sys.executable, "-m", *command], cwd=ROOT).returncode
        seconds = time.time() - started
        self.log["commands"].append({"step": step, "command": shlex.join(command), "seconds": round(seconds, 1),
                                     "exit": code, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                                     "load_average": round(os.getloadavg()[0], 2)})
        self.save_log()
        if code != 0:
            raise SystemExit(f"study step {step!r} failed (exit {code}); rerun to continue")

    def save_log(self) -> None:
        """Write ``OUT/study.json`` (atomically: an interrupted write never loses the log)."""
        self.log["settings"] = self.settings.to_json()
        self.log.setdefault("machine", machine())
        self.out.mkdir(parents=True, exist_ok=True)
        temporary = self.log_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.log, indent=2))
        temporary.replace(self.log_path)

    # ----------------------------------------------------------------------------------------------- steps
    def run(self) -> None:
        """Every step, skipping those whose results exist."""
        s = self.settings
        if not completed(self.extractor):
            # An interrupted extractor run continues from its last checkpoint; one stopped before its first
            # checkpoint starts again (`dmlplug run` refuses a non-empty --out without --resume).
            resume = (self.extractor / "checkpoints" / "last.pt").is_file()
            if self.extractor.exists() and not resume:
                shutil.rmtree(self.extractor)
            self.dmlplug("extractor", "run", RECIPES / "extractor.toml", "--out", self.extractor,
                         *sets(s.extractor_overrides), *(["--resume"] if resume else []))
        if not self.splits.is_file():
            self.dmlplug("splits", "oodml", "splits", *split_dataset_options(s), "--extractor-run", self.extractor,
                         "--num-splits", s.num_splits, "--shots", ",".join(map(str, s.shots)),
                         "--episodes", s.episodes, *s.split_options, "--out", self.splits)
        seeds = ",".join(map(str, s.seeds))
        for method in s.methods:
            recipe = RECIPES / f"{method}.toml"
            self.dmlplug(f"sweep {method}", "oodml", "run", recipe, "--splits", self.splits, "--seeds", seeds,
                         "--out", self.sweep(method), *sets(s.overrides))
            self.dmlplug(f"summarize {method}", "oodml", "summarize", self.sweep(method))
        hardest = most_shifted_split(self.splits)
        for method in s.methods:
            recipe = RECIPES / f"{method}.toml"
            self.dmlplug(f"few-shot base {method}", "oodml", "run", recipe, "--splits", self.splits,
                         "--split-ids", hardest, "--part", "few_shot_base", "--seeds", seeds,
                         "--out", self.fewshot_sweep(method), *sets([*s.overrides, "evaluation.split=val"]))
            for seed in s.seeds:
                run_dir = fewshot_run(self.fewshot_sweep(method), hardest, seed)
                if not (run_dir / "fewshot.json").is_file():
                    self.dmlplug(f"few-shot {method} seed {seed}", "fewshot", run_dir,
                                 "--shots", ",".join(map(str, s.shots)), "--episodes", s.episodes,
                                 *s.fewshot_options)


def relative(arg: str | Path | int) -> str:
    """A command-line argument as shown and logged: paths inside the repository relative to its root."""
    if isinstance(arg, Path) and arg.is_absolute() and arg.is_relative_to(ROOT):
        return str(arg.relative_to(ROOT))
    return str(arg)


def machine() -> dict:
    """The machine the study ran on (recorded once, with the first command)."""
    import torch

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.cuda.is_available()}


def completed(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a finished ``dmlplug run``."""
    results = run_dir / "results.json"
    return results.is_file() and json.loads(results.read_text()).get("status") == "completed"


def most_shifted_split(splits: Path) -> int:
    """The id of the split with the largest FID."""
    data = json.loads(splits.read_text())
    return max(data["splits"], key=lambda split: split["fid"])["id"]


def fewshot_run(sweep_dir: Path, split_id: int, seed: int) -> Path:
    """The run directory of a few-shot base sweep (the layout of ``dmlplug oodml run``)."""
    return sweep_dir / f"split-{split_id:02d}" / f"seed-{seed}"


def main(argv: list[str] | None = None) -> None:
    """The command line: ``run OUT`` or ``page OUT``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run (or continue) the study")
    run.add_argument("out", type=Path, help="study directory")
    run.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    run.add_argument("--num-splits", type=int, default=5)
    run.add_argument("--episodes", type=int, default=10)
    run.add_argument("--set", dest="overrides", action="append", default=[], help="override of every study run")
    run.add_argument("--extractor-set", dest="extractor_overrides", action="append", default=[],
                     help="override of the extractor run")
    run.add_argument("--split-option", dest="split_options", action="append", default=[],
                     help="extra option of `dmlplug oodml splits` (repeat: --split-option=--iterations "
                          "--split-option=3)")
    run.add_argument("--in-process", action="store_true",
                     help="run the dmlplug commands in this interpreter (one start-up for all; the tests use it)")
    run.add_argument("--fewshot-option", dest="fewshot_options", action="append", default=[],
                     help="extra option of `dmlplug fewshot`")
    page = commands.add_parser("page", help="regenerate the results page from a study directory")
    page.add_argument("out", type=Path, nargs="?", help="study directory")
    page.add_argument("--page", type=Path, default=ROOT / "docs" / "results" / "glyphs-oodml.md")
    page.add_argument("--from-numbers", action="store_true",
                      help="render the page and figure again from the numbers kept beside the page (its .json) "
                           "instead of collecting them from a study directory")
    args = parser.parse_args(argv)
    if args.command == "page" and (args.out is None) != args.from_numbers:
        parser.error("page needs a study directory, or --from-numbers without one")
    if args.command == "run":
        settings = StudySettings(args.out, methods=args.methods, seeds=args.seeds, num_splits=args.num_splits,
                                 episodes=args.episodes, overrides=args.overrides,
                                 extractor_overrides=args.extractor_overrides, split_options=args.split_options,
                                 fewshot_options=args.fewshot_options, in_process=args.in_process)
        Study(settings).run()
    elif args.from_numbers:
        from glyphs_oodml_page import write_page_from_numbers

        print(f"wrote {', '.join(map(str, write_page_from_numbers(args.page)))}")
    else:
        from glyphs_oodml_page import write_page

        print(f"wrote {', '.join(map(str, write_page(args.out, args.page)))}")


if __name__ == "__main__":
    main()
