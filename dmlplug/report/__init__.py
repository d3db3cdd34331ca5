"""``dmlplug report RUN_DIR ...``: compare runs in a Markdown/CSV table with learning curves and plugin sections.

Runs are grouped by their resolved recipe with ``run.seed``, ``run.name`` and ``run.output_dir`` left out:
runs of one group differ only in their seed, and their metrics are reported as mean ± sample standard
deviation over distinct seeds (runs that repeat a seed are averaged first and said so; one seed shows no
spread). Only completed runs are averaged together: failed and interrupted runs form their own rows, marked
``[failed]`` / ``[interrupted]``. Each group is labelled by its run name, plus the recipe values that tell
groups of the same name apart (:mod:`dmlplug.report.labels`).

Values:
    * final: ``results.json`` ``metrics`` (the last evaluation of the report split);
    * best: the checkpoint selected on the selection split (or the last epoch's, where no split selects),
      evaluated on the report split (:func:`dmlplug.evaluation.best.read_best`, the definition every command
      uses); a best value the test split selected is marked ``†test-selected`` and explained under the table;
    * learning curves: every evaluation in ``metrics.jsonl`` (mean over the group's seeds per epoch), and the
      training loss ``train/loss/total`` from the runs' TensorBoard events when there are some
      (:mod:`dmlplug.report.figures`);
    * retrieval pictures: the last evaluation's grids of worst and sampled queries of each run (a few runs
      at most, see :mod:`dmlplug.report.pictures`), copied into the figure folder;
    * plugin sections: every plugin's ``report_section(groups, metrics, figure_dir)`` hook may add table
      columns, a Markdown section and figures (the ooDML plugin adds each split's FID, AGS and metric-vs-FID
      plots), see :class:`dmlplug.protocols.ReportSection`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlplug.evaluation.formatting import format_mean_spread
from dmlplug.protocols import ReportSection
from dmlplug.report import pictures as _pictures
from dmlplug.report.runs import Group, RunRecord, choose_metrics, find_runs, group_runs, read_run

#: Appended to a best value that the test split selected (issue #41: such numbers never go unlabelled).
TEST_SELECTED = " †test-selected"

if TYPE_CHECKING:
    from dmlplug.plugins import PluginHost

__all__ = ["Group", "Report", "RunRecord", "build_report", "choose_metrics", "find_runs", "group_runs",
           "plugin_sections", "read_run", "write_report"]


@dataclass
class Report:
    """Groups, the metrics shown, the plugins' sections, the figures written and the runs' retrieval pictures."""

    groups: list[Group]
    metrics: list[str]
    sections: list[ReportSection] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    pictures: list[_pictures.RunPictures] = field(default_factory=list)
    pictures_left_out: int = 0

    def extra_columns(self) -> list[str]:
        """The sections' table columns, in section order then first appearance."""
        names: dict[str, None] = {}
        for section in self.sections:
            for cells in section.columns.values():
                names.update(dict.fromkeys(cells))
        return list(names)

    def extra_cells(self, group: Group, empty: str) -> list[str]:
        """``group``'s cells of :meth:`extra_columns` (``empty`` where a section has none)."""
        cells: dict[str, str] = {}
        for section in self.sections:
            cells.update(section.columns.get(group.key, {}))
        return [cells.get(name, empty) for name in self.extra_columns()]

    def markdown(self, relative_to: Path | None = None) -> str:
        """The report as Markdown (figures linked relative to ``relative_to`` when given)."""
        lines = ["# dmlplug report", ""]
        protocols = list(dict.fromkeys(g.protocol for g in self.groups))
        head = ["run", "seeds", *(["selected → reported"] if len(protocols) > 1 else []), *self.extra_columns()]
        head += [f"final {m}" for m in self.metrics] + [f"best {m}" for m in self.metrics]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for g in self.groups:
            cells = [g.label, _seeds_cell(g), *([g.protocol] if len(protocols) > 1 else []),
                     *self.extra_cells(g, "–")]
            cells += [_cell(g.stat("final", m)) for m in self.metrics]
            mark = TEST_SELECTED if any(r.selected_on == "test" for r in g.runs) else ""
            cells += [_cell(g.stat("best", m)) + mark for m in self.metrics]
            lines.append("| " + " | ".join(cells) + " |")
        splits = f" Selected on → reported on: {protocols[0]}." if len(protocols) == 1 else ""
        lines += ["", "Values: mean ± sample std over distinct seeds (a single seed shows its value). final = last "
                      "evaluation of the report split, best = the checkpoint selected by `evaluation.metric` on the "
                      "selection split (last: the last epoch's model, no split selects), evaluated on the report "
                      f"split.{splits}", ""]
        if any(r.selected_on == "test" for g in self.groups for r in g.runs):
            lines += [f"{TEST_SELECTED.strip()}: best values selected on the TEST split (`select_on = \"test\"` in "
                      "the recipe): chosen by the test classes, so optimistic; not comparable with values selected "
                      "without the test set.", ""]
        repeats = [f"{g.label}: " + ", ".join(f"seed {seed} ran {count} times" for seed, count in
                                              g.repeated_seeds.items()) for g in self.groups if g.repeated_seeds]
        if repeats:
            lines += ["Repeated seeds (their runs are averaged into one value per seed before the mean and spread "
                      "over seeds; a spread between runs of one seed is not a spread over seeds): "
                      + "; ".join(repeats) + ".", ""]
        unfinished = [g.label for g in self.groups if g.status != "completed"]
        if unfinished:
            lines += ["Not completed (their values are those of their last evaluation, kept apart from the "
                      "completed runs): " + ", ".join(unfinished) + ".", ""]
        for section in self.sections:
            lines += [f"## {section.title}", ""]
            if section.markdown.strip():
                lines += [section.markdown.strip(), ""]
        lines += ["## Runs", ""]
        for g in self.groups:
            for r in g.runs:
                where = f"epoch {r.best_epoch}" if r.best_epoch is not None else "–"
                note = f"; {r.best_note}" if r.best_note else ""
                chosen = "last epoch" if r.selected_on == "last" else \
                    f"selected on {'TEST' if r.selected_on == 'test' else r.selected_on}"
                lines.append(f"- {g.label}: `{r.directory}` (seed {r.seed}, {r.status}, best at {where}, {chosen}, "
                             f"reported on {r.reported_on}{note})")
        if self.figures:
            lines += ["", "## Figures", ""]
            for path in self.figures:
                shown = path.relative_to(relative_to) if relative_to is not None else path
                lines.append(f"![{path.stem}]({shown.as_posix()})")
                lines.append("")
        # Last: the pictures are tall, the table and curves stay at the top.
        pictures = _pictures.markdown(self.pictures, self.pictures_left_out, relative_to)
        lines += ([""] if pictures and lines[-1] else []) + pictures
        return "\n".join(lines).rstrip() + "\n"

    def csv(self) -> str:
        """One row per group: label, runs, distinct seeds, splits, the sections' columns, values, status.

        The values are mean and std of final and best values (std empty for a single seed).
        """
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        header = ["run", "runs", "seeds", "selected_on", "reported_on", *self.extra_columns()]
        for which in ("final", "best"):
            for m in self.metrics:
                header += [f"{which}/{m}/mean", f"{which}/{m}/std"]
        writer.writerow([*header, "status"])
        for g in self.groups:
            row: list[Any] = [g.label, len(g.runs), " ".join(str(s) for s in g.distinct_seeds),
                              " ".join(dict.fromkeys(r.selected_on for r in g.runs)),
                              " ".join(dict.fromkeys(r.reported_on for r in g.runs)), *self.extra_cells(g, "")]
            for which in ("final", "best"):
                for m in self.metrics:
                    mean, std, n = g.stat(which, m)
                    row += [_num(mean), _num(std) if n > 1 else ""]
            writer.writerow([*row, g.status])
        return buffer.getvalue()


def _seeds_cell(group: Group) -> str:
    """Distinct seeds, and the number of runs when some repeat a seed (``1 (2 runs)``)."""
    seeds = len(group.distinct_seeds)
    return f"{seeds} ({len(group.runs)} runs)" if len(group.runs) > seeds else str(seeds)


def _cell(stat: tuple[float, float, int]) -> str:
    mean, std, n = stat
    return format_mean_spread(mean, std, n)


def _num(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


def plugin_sections(groups: Sequence[Group], metrics: Sequence[str], figure_dir: Path | None,
                    host: PluginHost) -> list[ReportSection]:
    """The sections the plugins' ``report_section`` hooks return, in plugin registration order.

    Each plugin is called on its own: one that fails adds a section saying so, and the report goes on.
    """
    arguments = {"groups": list(groups), "metrics": list(metrics), "figure_dir": figure_dir}

    def failed(plugin: str, exc: Exception) -> ReportSection:
        # A plugin's bug must not take the whole report down: its section says what went wrong.
        return ReportSection(f"{plugin} (failed)", markdown=f"`{type(exc).__name__}: {exc}`")

    results = host.call_each("report_section", lambda plugin: arguments, on_error=failed)
    return [section for _, section in results if section is not None]


def build_report(paths: Sequence[str | Path], *, host: PluginHost, metrics: Sequence[str] | None = None,
                 figure_dir: Path | None = None) -> Report:
    """Read the runs, group them, and (with ``figure_dir``) draw the PNG figures.

    ``host`` (the command's plugin host) gives the components' defaults and the plugins' report sections.

    Raises:
        DataError: No run found, unreadable runs, or an unknown metric.
    """
    from dmlplug.report.figures import learning_curves, loss_curves, save, slug

    runs = [read_run(d) for d in find_runs(paths)]
    groups = group_runs(runs, host.registry)
    chosen = choose_metrics(groups, metrics)
    report = Report(groups, chosen, sections=plugin_sections(groups, chosen, figure_dir, host))
    report.pictures, report.pictures_left_out = _pictures.collect(groups)
    if figure_dir is not None:
        for metric in chosen[:6]:
            report.figures.append(save(learning_curves(groups, metric), figure_dir / f"curve_{slug(metric)}.png"))
        if any(r.loss_curve for g in groups for r in g.runs):
            report.figures.append(save(loss_curves(groups), figure_dir / "train_loss.png"))
        _pictures.copy_into(report.pictures, figure_dir)
    report.figures += [path for section in report.sections for path in section.figures]
    return report


def write_report(paths: Sequence[str | Path], out: Path | None = None, *, host: PluginHost,
                 csv_path: Path | None = None, metrics: Sequence[str] | None = None) -> tuple[Report, str]:
    """Build the report and write its files; returns the report and its Markdown.

    With ``out``: the Markdown goes to ``out``, the figures to ``<out stem>_figures/`` and the CSV table to
    ``csv_path`` or else ``<out stem>.csv``. Without ``out`` no figure is drawn (the CSV only with ``csv_path``).
    """
    from dmlplug.files import write_text

    figure_dir = out.parent / f"{out.stem}_figures" if out is not None else None
    report = build_report(paths, host=host, metrics=metrics, figure_dir=figure_dir)
    text = report.markdown(relative_to=out.parent if out is not None else None)
    if out is not None:
        write_text(out, text)
        csv_path = csv_path or out.with_suffix(".csv")
    if csv_path is not None:
        write_text(csv_path, report.csv())
    return report, text
