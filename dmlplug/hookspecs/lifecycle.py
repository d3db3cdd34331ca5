"""The hooks of the command line, of a run's lifecycle and of reports.

``register_commands`` and ``validate_file`` (the command line), ``on_*`` (a run's lifecycle; ``on_bundle_exported``
after ``dmlplug export``) and ``report_section`` (``dmlplug report``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlplug.hookspecs.registration import hookspec
from dmlplug.protocols import ReportSection, RunView

if TYPE_CHECKING:
    import typer

    from dmlplug.registry import Registry


@hookspec
def register_commands(app: typer.Typer) -> None:
    """Add sub-commands to the ``dmlplug`` command line.

    Called when the CLI starts.

    Args:
        app: The root ``typer.Typer`` application; add module-level functions with ``app.command("name")(fn)``
            or sub-apps with ``app.add_typer(...)``.

    Example::

        def cmd_hello(name: Annotated[str, typer.Option(help="Who.")] = "world") -> None:
            print("hello", name)

        @hookimpl
        def register_commands(app):
            app.command("hello")(cmd_hello)
    """


@hookspec
def on_run_start(run: RunView) -> None:
    """Called once the run is built, before the initial evaluation.

    Args:
        run: A read-only :class:`dmlplug.protocols.RunView` of the run (recipe, run directory, epoch,
            step, model, components, device, latest metrics).

    Example::

        @hookimpl
        def on_run_start(run):
            print("writing to", run.directory)
    """


@hookspec
def on_epoch_start(run: RunView, epoch: int) -> None:
    """Called at the start of every training epoch.

    Args:
        run: The current run.
        epoch: Epoch number, starting at 1.

    Example::

        @hookimpl
        def on_epoch_start(run, epoch):
            print("epoch", epoch)
    """


@hookspec
def on_step_end(run: RunView, step: int, losses: Mapping[str, float]) -> None:
    """Called after every optimizer step.

    Args:
        run: The current run.
        step: Global step number, starting at 1.
        losses: A read-only mapping of every loss term by name (``loss``, ``reg/<name>`` …) and ``total``, as
            floats. The values are read from the device lazily: on logging steps (``step % run.log_every ==
            0``) they are already on the host; reading them on other steps waits for the device (a sync
            the engine itself avoids), so a hook that needs them every step costs speed on a GPU.

    Example::

        @hookimpl
        def on_step_end(run, step, losses):
            print(step, losses["total"])
    """


@hookspec
def on_eval_end(run: RunView, epoch: int, split: str, metrics: dict[str, float]) -> None:
    """Called after every evaluation.

    Args:
        run: The current run.
        epoch: The epoch just finished (0 for the evaluation of the untrained model).
        split: The evaluated split (``test`` or ``val``).
        metrics: Metric values by name (``recall@1``, ``map@r`` …).

    Example::

        @hookimpl
        def on_eval_end(run, epoch, split, metrics):
            print(epoch, split, metrics.get("recall@1"))
    """


@hookspec
def on_checkpoint(run: RunView, path: Path) -> None:
    """Called after a checkpoint has been written (atomically) to ``path``.

    Args:
        run: The current run.
        path: ``pathlib.Path`` of the checkpoint file.

    Example::

        @hookimpl
        def on_checkpoint(run, path):
            print("saved", path)
    """


@hookspec
def on_run_end(run: RunView, status: str, error: BaseException | None) -> None:
    """Called once when the run ends, whatever the outcome.

    Args:
        run: The current run.
        status: ``"completed"``, ``"failed"``, ``"interrupted"``, or the ``status`` of a
            :class:`~dmlplug.errors.RunStopped` a hook raised to end the run early (e.g. ``"pruned"``).
        error: The exception that ended the run, or ``None``.

    Example::

        @hookimpl
        def on_run_end(run, status, error):
            print("run", status)
    """


@hookspec
def on_bundle_exported(bundle: Path, manifest: Mapping[str, Any], run_dir: Path | None, log_model: bool) -> str | None:
    """Called by ``dmlplug export`` (and :func:`dmlplug.export`) after a bundle was written and verified.

    Called on every plugin, one at a time (not on a run's loggers: no run is running). The bundle is complete
    when the hook is called and stays whatever the hook does; a plugin that fails raises a
    :class:`~dmlplug.errors.DmlplugError` (what, where, fix), which ``dmlplug export`` reports after saying that the
    bundle was written. The built-in ``mlflow`` logger implements it: with ``log_model`` it logs the bundle as a
    model of the run's MLflow run (docs/monitoring.md).

    Args:
        bundle: The bundle folder (``bundle.json``, the model file); read it, never change it.
        manifest: ``bundle.json`` as a read-only mapping (model format, embedding size, source run …).
        run_dir: The exported run's directory, or ``None`` when a checkpoint file outside a run was exported.
        log_model: The user asked (``dmlplug export --log-model``) for the bundle to be logged as a model to the
            experiment trackers of the run; a plugin logs nothing when it is ``False``.

    Returns:
        One line saying what the plugin did with the bundle (printed by ``dmlplug export``), e.g. where it logged
        the model, or ``None`` when it did nothing. With ``log_model``, an export on which every plugin returned
        ``None`` fails: nothing logged the model the user asked for.

    Example::

        @hookimpl
        def on_bundle_exported(bundle, manifest, run_dir, log_model):
            if not log_model or run_dir is None:
                return None
            uri = my_tracker.upload(bundle, run=my_tracker.run_of(run_dir))
            return f"my-tracker: logged the bundle as {uri}"
    """


@hookspec
def validate_file(path: Path, overrides: list[str], registry: Registry) -> str | None:
    """Check a file ``dmlplug validate`` is given that a plugin owns (not a recipe), such as a search space.

    Called on every plugin, one at a time, before the file is read as a recipe. A plugin that does not own the
    file returns ``None``; the file is then validated as a recipe when no plugin claims it.

    Args:
        path: The file given to ``dmlplug validate``.
        overrides: Its ``--set`` strings.
        registry: The registry of the command's plugin host: component names in the file resolve in it.

    Returns:
        A one-line summary printed after ``PATH: OK`` when the plugin owns the file and it is valid, else ``None``.

    Raises:
        dmlplug.errors.DmlplugError: The plugin owns the file and it is invalid (shown like a recipe error).

    Example::

        @hookimpl
        def validate_file(path, overrides, registry):
            if not path.name.endswith(".space.toml"):
                return None
            check_my_space(path, overrides, registry)   # raises a RecipeError naming what is wrong
            return "search space"
    """


@hookspec
def report_section(groups: Sequence[Any], metrics: Sequence[str], figure_dir: Path | None) -> ReportSection | None:
    """Add a section to ``dmlplug report`` (called once per report, on every plugin).

    Args:
        groups: The report's run groups (runs that differ only in their seed), each with ``label``, ``key``,
            ``runs`` (each run with ``directory``, ``recipe`` as a dict, ``final`` and ``best`` metrics) and
            ``stat(which, metric) -> (mean, std, n)`` over seeds (``which``: ``"final"`` or ``"best"``).
        metrics: The metrics the report shows.
        figure_dir: Where to write PNG figures, or ``None`` when the report draws none.

    Returns:
        A :class:`dmlplug.protocols.ReportSection`, or ``None`` when the plugin has nothing to add.

    Example::

        @hookimpl
        def report_section(groups, metrics, figure_dir):
            return ReportSection("Runs", markdown=f"{len(groups)} groups")
    """
