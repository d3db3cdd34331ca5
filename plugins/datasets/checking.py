"""``dmlplug data check``: is a dataset on disk complete and usable, before a run finds out in its first epoch?

Three ways to name the data, one report (:class:`CheckReport`):

* a benchmark (:func:`check_benchmark`: ``cub200``, ``cars196``, ``sop``, ``inaturalist2018``), under a data root:
  its counts against the official ones of :mod:`.sources`;
* any registered dataset by name with its own ``root`` (:func:`check_named`: ``folder``, ``csv``, a plugin's), its
  other parameters as ``--set key=value``: every split needs the classes a run needs;
* a recipe (:func:`check_recipe_data`): its dataset as the recipe configures it, and the run's own checks of the
  splits, the batch size and the sampler (:func:`dmlplug.check_data`: the sampler is built on the training labels).

In every case each listed file is checked: missing ones (one directory listing per folder), then the cheap check of
:mod:`.file_checks` (readable, an image header, a PNG's end), or with ``deep`` every image decoded. Every bad file is
named with its reason (missing files: the first :data:`SHOW`, and the count).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.errors import DataError, DmlplugError
from dmlplug_builtins.datasets.file_checks import Problem, scan, source_paths
from dmlplug_builtins.datasets.sources import DownloadSpec

Echo = Callable[[str], object]

#: How many missing files a report names before it only counts them (a partial copy misses thousands).
SHOW = 10
_SPLITS = ("train", "val", "test")


@dataclass
class CheckReport:
    """What a check found: counts, missing and bad files, problems (empty: the data is complete and usable)."""

    title: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    corrupt: list[Problem] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is missing, unusable, off count or too small for a run."""
        return not self.problems


def check_benchmark(spec: DownloadSpec, root: Path, *, deep: bool = False,
                    dataset_params: dict[str, Any] | None = None, echo: Echo = print) -> CheckReport:
    """Compare ``root / spec.folder`` with the official counts of ``spec``; name missing and unusable images.

    Raises:
        DataError: The loader cannot read the tree at all (a missing annotation file: its own message).
    """
    folder = root / spec.folder
    bundle = _build(spec.name, {"root": str(folder), **(dataset_params or {})})
    report = CheckReport(title=f"{spec.name} at {folder}", expected=dict(spec.expected))
    _inspect(bundle, report, deep)
    for key, want in spec.expected.items():
        got = report.counts[key]
        if got != want:
            report.problems.insert(0, f"{key}: {got:,} (official: {want:,})")
    _print(report, deep, echo)
    return report


def check_named(name: str, params: dict[str, Any], *, deep: bool = False, echo: Echo = print) -> CheckReport:
    """Build the registered dataset ``name`` with ``params``; check its files and that every split suits a run.

    Raises:
        DataError: The loader cannot read the data at all (no root, no CSV file: its own message).
    """
    bundle = _build(name, params)
    report = CheckReport(title=f"{name} at {params.get('root', '(its default root)')}")
    _inspect(bundle, report, deep)
    from dmlplug.data.splits import check_split_sizes

    for split in _SPLITS:
        try:
            check_split_sizes(bundle, (split,), where=f"[data.dataset] ({name})")
        except DataError as exc:
            report.problems.append(exc.what)
    _print(report, deep, echo)
    echo("  (`dmlplug data check RECIPE` also checks a recipe's batch size and sampler against these classes)")
    return report


def check_recipe_data(recipe: str, overrides: list[str], *, deep: bool = False, echo: Echo = print) -> CheckReport:
    """The recipe's dataset: its files, then the splits, batch size and sampler as ``dmlplug run`` checks them.

    Raises:
        RecipeError: The recipe does not validate.
        DataError: The loader cannot read the data at all.
    """
    import dmlplug

    validated = dmlplug.validate(recipe, overrides)
    spec = validated.components["data.dataset"]
    bundle = _build(spec.name, spec.params.model_dump())
    report = CheckReport(title=f"{spec.name} of {recipe}")
    _inspect(bundle, report, deep)
    # The files were checked above, each named: the run's checks of the split and the sampler come next.
    quiet_files = ["data.dataset.check_files=false"] if _takes(spec.name, "check_files") else []
    try:
        report.counts["steps_per_epoch"] = dmlplug.check_data(recipe, [*overrides, *quiet_files])["steps_per_epoch"]
    except DmlplugError as exc:
        report.problems.append(exc.what + (f" ({exc.where})" if exc.where else ""))
    _print(report, deep, echo)
    return report


def _takes(name: str, key: str) -> bool:
    import dmlplug

    return key in dmlplug.plugin_host().registry.get("datasets", name).params.model_fields


def requires_root(name: str) -> bool:
    """Whether the registered dataset ``name`` has a ``root`` parameter without a default (``folder``, ``csv``)."""
    import dmlplug

    root = dmlplug.plugin_host().registry.get("datasets", name).params.model_fields.get("root")
    return root is not None and root.is_required()


def _build(name: str, params: dict[str, Any]) -> Any:
    """The dataset built without its own file check (this check names every file instead of failing at the first)."""
    import dmlplug

    if _takes(name, "check_files"):
        params = {**params, "check_files": False}
    return dmlplug.create("dataset", name, **params)


def _inspect(bundle: Any, report: CheckReport, deep: bool) -> None:
    """Counts of ``bundle``'s splits, then its missing and unusable files, into ``report``."""
    from dmlplug.data.image_files import find_missing

    splits = {name: getattr(bundle, name, None) for name in _SPLITS}
    present = {name: source for name, source in splits.items() if source is not None}
    names: set[str] = set()
    for source in present.values():
        names.update(getattr(source, "class_names", ()) or ())
    report.counts = {"images": sum(len(s) for s in present.values()),
                     "classes": len(names) or sum(int(s.num_classes) for s in present.values())}
    for name in ("train", "test", "val"):
        if name in present:
            report.counts.update({f"{name}_images": len(present[name]), f"{name}_classes": present[name].num_classes})
    paths = source_paths(present.values())
    report.missing = find_missing(paths)
    if report.missing:
        report.problems.append(f"{len(report.missing):,} listed images are missing")
    gone = set(report.missing)
    report.corrupt = scan([p for p in paths if p not in gone], deep=deep)
    if report.corrupt:
        count = len(report.corrupt)
        report.problems.append(f"{count:,} image{' is' if count == 1 else 's are'} not usable"
                               + (" (corrupt, truncated or not images)" if deep else " (not images, or cut short)"))


def _print(report: CheckReport, deep: bool, echo: Echo) -> None:
    echo(report.title)
    for key, got in report.counts.items():
        want = report.expected.get(key)
        mark = "" if want is None else ("  ok" if got == want else f"  MISMATCH (official {want:,})")
        echo(f"  {key:<16}{got:>10,}{mark}")
    if report.missing:
        echo(f"  missing ({len(report.missing):,}):")
        for path in report.missing[:SHOW]:
            echo(f"    {path}")
        if len(report.missing) > SHOW:
            echo(f"    ... and {len(report.missing) - SHOW:,} more")
    if report.corrupt:
        echo(f"  corrupt ({len(report.corrupt):,}):")
        for path, reason in report.corrupt:  # every one: each is a file to replace
            echo(f"    {path}: {reason}")
    if report.ok:
        echo("  complete" + ("; every image decodes" if deep else
                             "; every image has a readable header (--deep also decodes every image)"))
