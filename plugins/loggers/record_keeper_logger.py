"""The ``record_keeper`` logger: PML's recordable statistics through record-keeper, as PML users know it.

pytorch-metric-learning components list what they can record in ``_record_these`` (hyper-parameters such
as a learnable margin) and ``_record_these_stats`` (statistics such as the number of mined pairs, kept only
when the component was built with ``collect_stats``). This logger turns statistics collection on for the
run's loss, miner and regularizers (and their distances, reducers and PML regularizers), and every
``every`` steps hands them to a ``record_keeper.RecordKeeper``: one CSV file per component and an SQLite
database (``logs.db``) in ``<run>/record_keeper/``, and TensorBoard scalars ``train/pml/<group>/<series>``.
Evaluation metrics go to the CSV/SQLite records too (group ``eval_<split>``).

Records are written to disk at every checkpoint, and a resumed run first drops the rows past its checkpoint
(:func:`trim_records`), so after a kill and a resume the records hold every step once, as an uninterrupted
run's do.
"""

from __future__ import annotations

import csv
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlplug import hookimpl
from dmlplug.protocols import RunView

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class _PrefixedWriter:
    """Hands record-keeper's ``add_scalar`` calls to a SummaryWriter under ``train/pml/``."""

    def __init__(self, writer: Any):
        self.writer = writer

    def add_scalar(self, tag: str, value: Any, step: int) -> None:
        self.writer.add_scalar(f"train/pml/{tag}", value, step)


def enable_pml_stats(module: Any, rebuild: Any) -> int:
    """Turn on PML's statistics collection in every ``ModuleWithRecords`` of an already built component.

    PML decides which statistics a module has in its constructor, and only when ``collect_stats`` is on.
    The names are taken from a second instance built by ``rebuild()`` with PML's global ``COLLECT_STATS``
    switched on (random-number state is saved and restored, so the run's reproducibility is unchanged).

    Args:
        module: The built component (``torch.nn.Module``).
        rebuild: Callable building the same component again.

    Returns:
        Number of modules whose statistics are now collected.
    """
    import random

    import numpy as np
    import torch
    from pytorch_metric_learning.utils import common_functions as c_f
    from pytorch_metric_learning.utils.module_with_records import ModuleWithRecords

    if not isinstance(module, torch.nn.Module):
        return 0
    off = [m for m in module.modules() if isinstance(m, ModuleWithRecords) and not m.collect_stats]
    if not off:
        return 0
    previous, py_state, np_state = c_f.COLLECT_STATS, random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        c_f.COLLECT_STATS = True
        try:
            fresh = rebuild()
        finally:
            c_f.COLLECT_STATS = previous
            random.setstate(py_state)
            np.random.set_state(np_state)
    fresh_modules = dict(fresh.named_modules()) if isinstance(fresh, torch.nn.Module) else {}
    enabled = 0
    for name, m in module.named_modules():
        twin: Any = fresh_modules.get(name)  # Any: a PML module (pytorch_metric_learning has no types)
        if isinstance(m, ModuleWithRecords) and type(twin) is type(m):
            m.collect_stats = True
            for stat in getattr(twin, "_record_these_stats", []):
                c_f.add_to_recordable_attributes(m, name=stat, is_stat=True)
            enabled += 1
    return enabled


def recordable(components: dict[str, Any]) -> dict[str, Any]:
    """Every module of the components that has recordable attributes, keyed ``<component>_<submodule path>``."""
    import torch

    out: dict[str, Any] = {}
    for prefix, component in components.items():
        if not isinstance(component, torch.nn.Module):
            continue
        for name, module in component.named_modules():
            if getattr(module, "_record_these", None) or getattr(module, "_record_these_stats", None):
                out["_".join([prefix, *name.split(".")]) if name else prefix] = module
    return out


class RecordKeeperLogger:
    """Records PML statistics every ``every`` steps and evaluation metrics at every evaluation.

    Args:
        params: The logger's :class:`~dmlplug_builtins.loggers.RecordKeeperParams`.
        rebuild: ``rebuild(path)`` builds a fresh instance of the recipe's component at ``path``
            (:meth:`dmlplug.context.BuildContext.rebuild` of the run's context).
    """

    def __init__(self, params: Any, rebuild: Callable[[str], Any]):
        self.params = params
        self.rebuild = rebuild
        # record_keeper has no types: a RecordKeeper and a RecordWriter once on_run_start ran.
        self.keeper: Any = None
        self.writer: Any = None
        self.tb: SummaryWriter | None = None
        self.watched: dict[str, Any] = {}

    @hookimpl
    def on_run_start(self, run: RunView) -> None:
        """Turn on PML statistics and open the record writer."""
        import record_keeper
        from pytorch_metric_learning.utils import common_functions as c_f

        if run.resumed:  # rows written after the checkpoint are trained and recorded again
            trim_records(run.directory / self.params.subdir, run.step)
        components = trained_components(run)
        for path, module in components.items():
            enable_pml_stats(module, lambda path=path: self.rebuild(path))
        self.watched = recordable(dict(zip(record_names(run), components.values(), strict=True)))
        self.writer = record_keeper.RecordWriter(folder=str(run.directory / self.params.subdir))
        if self.params.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            from dmlplug_builtins.loggers import events

            # After a resume, drop events logged past the checkpoint, as the TensorBoard logger does.
            log_dir = run.directory / self.params.tensorboard_subdir
            events.prepare(log_dir, run)
            self.tb = SummaryWriter(log_dir=str(log_dir))
        self.keeper = record_keeper.RecordKeeper(
            tensorboard_writer=_PrefixedWriter(self.tb) if self.tb is not None else None,
            record_writer=self.writer, attributes_to_search_for=c_f.list_of_recordable_attributes_list_names())

    @hookimpl
    def on_step_end(self, run: RunView, step: int, losses: Mapping[str, float]) -> None:
        """Record the components' attributes every ``every`` steps."""
        every = self.params.every or run.recipe.run.log_every
        if step % every == 0 and self.watched:
            self.keeper.update_records(self.watched, step)

    @hookimpl
    def on_eval_end(self, run: RunView, epoch: int, split: str, metrics: dict[str, float]) -> None:
        """Record the metrics and flush to CSV/SQLite."""
        for name, value in metrics.items():
            if isinstance(value, float | int):
                self.writer.append(f"eval_{split}", name, float(value), epoch)
        self.writer.append(f"eval_{split}", "step", run.step, epoch)
        self._save()

    @hookimpl
    def on_checkpoint(self, run: RunView, path: Path) -> None:
        """Write the records so far: a run killed later resumes from this checkpoint with none of them lost."""
        if self.keeper is not None:
            self._save()

    @hookimpl
    def on_run_end(self, run: RunView, status: str, error: BaseException | None) -> None:
        """Flush and close."""
        if self.keeper is not None:
            self._save()
        if self.tb is not None:
            self.tb.close()
            from dmlplug_builtins.loggers import events

            events.release(run.directory / self.params.tensorboard_subdir, run)

    def _save(self) -> None:
        self.keeper.save_records()
        if self.tb is not None:
            self.tb.flush()


#: The column holding the optimizer step of a record: ``~iteration~`` (record-keeper's), except in the
#: evaluation groups, whose iteration is the epoch and whose ``step`` column is the optimizer step.
ITERATION, EVAL_STEP = "~iteration~", "step"


def trim_records(folder: Path, step: int) -> None:
    """Drop every record of ``folder`` (CSV files and ``logs.db``) made after optimizer step ``step``.

    A row whose step cannot be read (a line cut by a kill) is dropped too: it was written after the
    checkpoint.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.csv")):
        _trim_csv(path, step)
    db_path = folder / "logs.db"
    if db_path.is_file():
        _trim_db(db_path, step)


def _step_column(group: str) -> str:
    return EVAL_STEP if group.startswith("eval_") else ITERATION


def _trim_csv(path: Path, step: int) -> None:
    column = _step_column(path.stem)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    kept, header, dropped = [], None, False
    for row in rows:
        if row and row[0] == ITERATION:  # record-keeper writes a new header when the columns change
            header = row
            kept.append(row)
            continue
        try:
            value = None if header is None else float(row[header.index(column)])  # no header yet: dropped
        except (ValueError, IndexError):
            value = None
        if value is not None and value <= step:
            kept.append(row)
        else:
            dropped = True
    while kept and kept[-1][0] == ITERATION:  # a header left without rows
        kept.pop()
        dropped = True
    if dropped:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(kept)


def _trim_db(path: Path, step: int) -> None:
    db = sqlite3.connect(path)
    try:
        tables = [row[0] for row in db.execute("select name from sqlite_master where type = 'table' "
                                               "and name not like 'sqlite_%'")]
        for table in tables:
            columns = {row[1] for row in db.execute(f"pragma table_info([{table}])")}
            column = _step_column(table)
            if column in columns:
                db.execute(f"delete from [{table}] where [{column}] > ? or [{column}] is null", (step,))
        db.commit()
    finally:
        db.close()


def trained_components(run: Any) -> dict[str, Any]:
    """The run's loss, miner and regularizers by recipe path (``"loss"``, ``"miner"``, ``"regularizers[0]"``)."""
    return {path: module for path, module in run.components.items()
            if path in ("loss", "miner") or path.startswith("regularizers[")}


def record_names(run: Any) -> list[str]:
    """Record group prefix of each of :func:`trained_components`: ``loss``, ``miner``, a regularizer's name."""
    resolved = run.resolved_recipe
    names = []
    for path in trained_components(run):
        if path.startswith("regularizers["):
            names.append(resolved["regularizers"][int(path[len("regularizers["):-1])]["name"])
        else:
            names.append(path)
    return names
