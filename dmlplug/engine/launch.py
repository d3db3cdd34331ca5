"""Starting a run: validate, choose or resume the run directory, build, train, handle signals.

:class:`~dmlplug.engine.run.Run` holds the state of one training run; this module decides where it runs,
whether it continues an earlier one, what is written before training starts, and how SIGTERM/SIGINT end it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlplug.checkpoints import load_checkpoint
from dmlplug.devices import resolve_device
from dmlplug.engine import distributed, facts, rundir
from dmlplug.engine import resume as _resume
from dmlplug.engine.batches import check_batch_size
from dmlplug.engine.data import shutdown_workers
from dmlplug.engine.run import Run, RunResult
from dmlplug.engine.seeding import configure_determinism
from dmlplug.errors import RunError, RunStopped
from dmlplug.files import write_json, write_text
from dmlplug.plugins import PluginHost
from dmlplug.recipe import ValidatedRecipe, load_recipe, override_pairs


def run_recipe(
    recipe: str | Path | dict[str, Any] | ValidatedRecipe,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    out: str | Path | None = None,
    device: str | None = None,
    quiet: bool = False,
    host: PluginHost,
    resume: bool = False,
    force: bool = False,
    hooks: Sequence[Any] = (),
) -> RunResult:
    """Validate, build and train a recipe (or continue a run); returns the :class:`RunResult`.

    Nothing is written until every component has been built, so bad input (unknown names, missing
    dataset, unwritable output) leaves no run directory behind.

    Args:
        recipe: A recipe (path, dict, validated), or an existing run directory to continue.
        overrides: ``--set`` style overrides.
        out: The run directory (for ``resume``: the run to continue; default the latest run of the recipe).
        device: Overrides ``run.device``.
        quiet: No progress bars.
        host: The plugin host whose registry the recipe is resolved in and whose plugins hear the run
            (``dmlplug.run`` and ``dmlplug run`` pass the process-wide one).
        resume: Continue the run from its ``checkpoints/last.pt`` (implied when ``recipe`` is a run directory).
        force: Continue even though the recipe differs from the run's; the difference is recorded.
        hooks: Objects with ``@hookimpl`` lifecycle methods (``on_eval_end`` …) registered for this run only, on
            the main process, like the run's loggers (a tuner's pruning callback).
    """
    pairs = override_pairs(overrides)
    if device is not None:
        pairs["run.device"] = device
    if not isinstance(recipe, dict | ValidatedRecipe) and _resume.is_run_directory(recipe):
        if out is not None and Path(out).resolve() != Path(recipe).resolve():
            raise RunError("a run directory was given together with a different --out",
                           where="--out", fix="give the run directory once")
        resume, out, recipe = True, Path(recipe), Path(recipe) / rundir.RESOLVED_RECIPE
    validated = recipe if isinstance(recipe, ValidatedRecipe) else load_recipe(recipe, pairs, registry=host.registry)
    r = validated.recipe
    info, resolved_device = distributed.setup(resolve_device(r.run.device))
    restore_determinism = configure_determinism(r.run.deterministic)
    try:
        result = _run_validated(validated, host, info, resolved_device, out=out, quiet=quiet, resume=resume,
                                force=force, hooks=hooks)
        distributed.barrier()  # no rank leaves the process group while another still uses it
        return result
    finally:
        restore_determinism()
        if info.enabled:
            distributed.teardown()


def _run_validated(validated: ValidatedRecipe, host: PluginHost, info: Any, device: str, *, out: Any, quiet: bool,
                   resume: bool, force: bool, hooks: Sequence[Any] = ()) -> RunResult:
    r = validated.recipe
    check_batch_size(r.data.batch_size, info.world_size)
    state, diff = None, []
    if resume:
        directory = Path(out) if out is not None else _resume.latest_run_directory(r.run.output_dir, r.run.name)
        if not _resume.is_run_directory(directory):
            raise RunError(f"--resume: {directory} is not a run directory (no {rundir.RESOLVED_RECIPE})",
                           where="--out / --resume", fix="give the directory a previous `dmlplug run` created")
        diff = _resume.check_recipe(directory, validated.dumps(), force)
        state = load_checkpoint(_resume.checkpoint_path(directory))
        if _resume.completed(state, r.run.epochs):
            raise RunError(f"nothing to resume: {directory} completed all {r.run.epochs} epochs",
                           where=str(directory),
                           fix="to train longer: --set run.epochs=N --force (N larger), or start a new run")
    else:
        problem = None
        if info.is_main:  # one directory name for every rank
            directory = rundir.choose_run_dir(r.run.output_dir, r.run.name, out)
            try:
                rundir.check_writable(directory)
            except RunError as exc:
                problem = exc
        directory, problem = distributed.broadcast_object((directory, problem) if info.is_main else None)
        if problem is not None:
            raise problem
    run = Run(validated, directory, host, device, quiet)
    run.build()
    run.prepare_training()
    if state is not None:
        run.restore(state)

    if info.is_main:
        directory.mkdir(parents=True, exist_ok=True)
        if state is None:
            write_text(directory / rundir.RESOLVED_RECIPE, validated.dumps())
            write_json(directory / rundir.ENVIRONMENT, rundir.environment_record(device, r.run.seed, host))
        else:
            _resume.trim_metrics(directory, run.step)
            _resume.record_resume(directory, state, diff, force, validated.dumps(), info.world_size)
        facts.write_facts(run)
    logger_names = []
    assert run.components is not None and run.training is not None  # set by run.build()
    if info.is_main:  # logging and progress bars on rank 0 only
        for i, (name, logger) in enumerate(run.components.loggers):
            logger_names.append(f"run-logger-{i}-{name}")
            host.register_run_plugin(logger, logger_names[-1])
        for i, hook in enumerate(hooks):
            logger_names.append(f"run-hooks-{i}")
            host.register_run_plugin(hook, logger_names[-1])
    status = "failed"
    error: BaseException | None = None
    previous_handlers = _install_signal_handlers(run)
    try:
        host.pm.hook.on_run_start(run=run.view)
        result = run.execute()
        status = "completed"
        if info.is_main:
            _finalise_environment(run)
        return result
    except (KeyboardInterrupt, _resume.RunInterrupted) as exc:
        status, error = "interrupted", exc
        run.result(status, exc)
        raise
    except RunStopped as exc:  # a hook ended the run on purpose (a pruned trial): its status, not "failed"
        status, error = exc.status, exc
        run.result(status, exc)
        raise
    except BaseException as exc:
        error = exc
        run.result(status, exc)
        raise
    finally:
        _restore_signal_handlers(previous_handlers)
        try:
            host.pm.hook.on_run_end(run=run.view, status=status, error=error)
        finally:
            for name in logger_names:
                host.unregister_run_plugin(name)
            shutdown_workers(run.training.loader)  # no loader process outlives the run


def _install_signal_handlers(run: Run) -> dict[int, Any]:
    """SIGTERM / SIGINT ask the run to stop after the current step (a second SIGINT stops at once)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        if run.stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run.stop_signal = signum
        print(f"dmlplug: {signal.Signals(signum).name} received, stopping after this step "
              "(checkpoint first; press Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, handler)
    return previous


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    import signal

    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _finalise_environment(run: Run) -> None:
    # The kNN backend is only known after the first evaluation.
    import json

    path = run.directory / rundir.ENVIRONMENT
    record = json.loads(path.read_text())
    record["knn_backend"] = run.knn_backend
    write_json(path, record)
