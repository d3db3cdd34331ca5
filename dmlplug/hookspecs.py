"""Every hook a dmlplug plugin can implement.

Plugins implement these with ``@dmlplug.hookimpl`` on functions of the same name. Built-in plugins
(the ``dmlplug_builtins`` package) use exactly these hooks, nothing private.

Registration hooks (``register_<kind>``) take one argument, the host-owned ``register`` callback
(:class:`dmlplug.protocols.Register`)::

    register(name, factory, *, params=ParamsModel, description="...", aliases=(), tags=(), requires=())

``tags`` and ``requires`` declare capabilities that ``dmlplug validate`` checks before anything is built.
``factory(params, ctx)`` (:class:`dmlplug.protocols.Factory`) is called only when a recipe (or
:func:`dmlplug.create`) builds the component; it imports torch / PML / timm inside its body (plugins load fast),
and what it returns is checked against the kind's Protocol (:data:`dmlplug.protocols.KIND_PROTOCOLS`).

Lifecycle hooks are notifications: they return nothing and are called on every registered plugin and
on the loggers of the current run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from dmlplug.protocols import Register, ReportSection, RunView

if TYPE_CHECKING:
    import typer

hookspec = pluggy.HookspecMarker("dmlplug")


@hookspec
def register_backbones(register: Register) -> None:
    """Register backbones (images -> pooled features and feature map).

    Called once when the plugin manager is built. The factory returns a ``torch.nn.Module`` whose
    ``forward(images)`` returns ``(features, feature_map)`` (``B×F`` and ``B×F×h×w``, the map may be
    ``None``) and which has an integer attribute ``num_features`` (F).

    Example::

        @hookimpl
        def register_backbones(register):
            register("tiny_cnn", build_tiny_cnn, params=TinyCnnParams, description="Four conv layers.")
    """


@hookspec
def register_heads(register: Register) -> None:
    """Register embedding heads (pooled features -> embedding).

    The factory gets ``ctx.feature_dim`` and returns a ``torch.nn.Module`` with ``forward(features)``
    returning a ``B×D`` tensor, or a dict of named embeddings together with an
    ``eval_embedding(outputs)`` method; it has an integer attribute ``embedding_size`` (the size of the
    evaluation embedding).

    Example::

        @hookimpl
        def register_heads(register):
            register("linear", build_linear_head, params=LinearHeadParams)
    """


@hookspec
def register_losses(register: Register) -> None:
    """Register metric-learning losses.

    The factory returns a module called as ``loss(embeddings, labels, indices_tuple)`` (the
    pytorch-metric-learning convention). ``ctx.num_classes`` and ``ctx.embedding_size`` are set.

    Example::

        @hookimpl
        def register_losses(register):
            register("my_contrastive", build_my_contrastive, params=MyContrastiveParams)
    """


@hookspec
def register_miners(register: Register) -> None:
    """Register tuple miners.

    The factory returns a module called as ``miner(embeddings, labels)`` that returns an index tuple
    (pairs ``(a1, p, a2, n)`` or triplets ``(a, p, n)``) as in pytorch-metric-learning.

    Example::

        @hookimpl
        def register_miners(register):
            register("hardest", build_hardest_miner, params=HardestParams)
    """


@hookspec
def register_regularizers(register: Register) -> None:
    """Register regularizers: extra loss terms computed from the whole training step.

    The factory returns a ``torch.nn.Module`` whose ``forward(step)`` takes a
    :class:`dmlplug.step.StepOutput` and returns a scalar tensor or a dict of named scalar
    tensors. The engine adds ``weight * term`` to the loss and logs every term by name.

    Example::

        @hookimpl
        def register_regularizers(register):
            register("tcm", build_tcm, params=TcmParams, description="Threshold-consistent margin.")
    """


@hookspec
def register_evaluators(register: Register) -> None:
    """Register evaluators (embeddings and labels -> named metrics).

    The factory returns an object with ``evaluate(eval_ctx) -> dict[str, float]`` where ``eval_ctx`` is a
    :class:`dmlplug.evaluation.EvalContext` that computes the kNN graph once for all evaluators.

    Example::

        @hookimpl
        def register_evaluators(register):
            register("recall", build_recall, params=RecallParams)
    """


@hookspec
def register_datasets(register: Register) -> None:
    """Register datasets.

    The factory returns a :class:`dmlplug.data.DatasetBundle` (train, test and optional validation
    :class:`dmlplug.data.ImageSource` objects). It must never download anything: a missing root is a
    :class:`dmlplug.errors.DataError` that names the expected layout.

    Example::

        @hookimpl
        def register_datasets(register):
            register("my_folder_set", build_my_set, params=MySetParams)
    """


@hookspec
def register_samplers(register: Register) -> None:
    """Register batch samplers.

    The factory gets ``ctx.train_labels`` (int64 numpy array) and ``ctx.batch_size`` and returns an
    iterable of index lists (a ``torch.utils.data.Sampler`` yielding batches) with a defined ``len``.

    Example::

        @hookimpl
        def register_samplers(register):
            register("m_per_class", build_m_per_class, params=MPerClassParams)
    """


@hookspec
def register_loggers(register: Register) -> None:
    """Register loggers.

    The factory returns an object implementing any of the lifecycle hooks below (with
    ``@hookimpl``); it is registered with the plugin manager for one run only and unregistered when the
    run ends, so an installed but unused logger hears nothing.

    Example::

        @hookimpl
        def register_loggers(register):
            register("jsonl_echo", build_echo_logger)
    """


@hookspec
def register_distances(register: Register) -> None:
    """Register distances, used as nested tables of losses and miners (``[loss.distance] name = "..."``).

    The factory returns a ``pytorch_metric_learning.distances.BaseDistance`` subclass instance
    (:class:`dmlplug.protocols.Distance`), so every PML loss and miner accepts it.

    Example::

        @hookimpl
        def register_distances(register):
            register("manhattan", build_manhattan, params=ManhattanParams)
    """


@hookspec
def register_reducers(register: Register) -> None:
    """Register reducers, nested in losses (``[loss.reducer] name = "..."``).

    The factory returns a ``pytorch_metric_learning.reducers.BaseReducer`` subclass instance
    (:class:`dmlplug.protocols.Reducer`).

    Example::

        @hookimpl
        def register_reducers(register):
            register("top_k_mean", build_top_k_mean, params=TopKMeanParams)
    """


@hookspec
def register_optimizers(register: Register) -> None:
    """Register optimizers (``[optimizer] name = "..."``).

    The factory gets the named parameter groups in ``ctx.require("param_groups")`` (learning rates and
    weight decays of ``[optimizer]`` and ``[optimizer.groups.<name>]`` applied) and returns a
    ``torch.optim.Optimizer`` over them (:class:`dmlplug.protocols.Optimizer`); its Params hold only the
    optimizer's own settings (betas, momentum …).

    Example::

        @hookimpl
        def register_optimizers(register):
            register("lion", build_lion, params=LionParams)
    """


@hookspec
def register_lr_schedules(register: Register) -> None:
    """Register learning-rate schedules (``[scheduler] name = "..."``).

    The factory gets the built optimizer in ``ctx.require("optimizer")`` and ``ctx.epochs``, and returns an
    object the engine steps once per epoch with the epoch's selection metric
    (:class:`dmlplug.protocols.LRSchedule`: ``step_epoch(metric)``, ``state_dict()``, ``load_state_dict()``).

    Example::

        @hookimpl
        def register_lr_schedules(register):
            register("linear_decay", build_linear_decay, params=LinearDecayParams)
    """


@hookspec
def register_augmentations(register: Register) -> None:
    """Register training augmentation policies (``[data] augment = "..."``).

    The factory gets ``ctx.require("image_size")`` and returns a transform: PIL image -> normalised
    ``3×S×S`` float tensor (:class:`dmlplug.protocols.Augmentation`). Evaluation's resize and centre crop
    stay the engine's, so every policy is evaluated the same way.

    Example::

        @hookimpl
        def register_augmentations(register):
            register("randaugment", build_randaugment, params=RandAugmentParams)
    """


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
def validate_file(path: Path, overrides: list[str]) -> str | None:
    """Check a file ``dmlplug validate`` is given that a plugin owns (not a recipe), such as a search space.

    Called on every plugin, one at a time, before the file is read as a recipe. A plugin that does not own the
    file returns ``None``; the file is then validated as a recipe when no plugin claims it.

    Args:
        path: The file given to ``dmlplug validate``.
        overrides: Its ``--set`` strings.

    Returns:
        A one-line summary printed after ``PATH: OK`` when the plugin owns the file and it is valid, else ``None``.

    Raises:
        dmlplug.errors.DmlplugError: The plugin owns the file and it is invalid (shown like a recipe error).

    Example::

        @hookimpl
        def validate_file(path, overrides):
            if not path.name.endswith(".space.toml"):
                return None
            check_my_space(path, overrides)   # raises a RecipeError naming what is wrong
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
