"""Every hook a dmlplug plugin can implement.

Plugins implement these with ``@dmlplug.hookimpl`` on functions of the same name. Built-in plugins
(the ``dmlplug_builtins`` package) use exactly these hooks, nothing private.

Registration hooks (``register_<kind>``) take one argument, the host-owned ``register`` callback
(:class:`dmlplug.protocols.Register`)::

    register(name, factory, *, params=ParamsModel, description="...", aliases=(), tags=(), requires=())

``params`` may instead be a function of no arguments returning the model, called when the parameters are first
read (a plugin that generates many models makes none of them while the host loads). ``tags`` and ``requires``
declare capabilities that ``dmlplug validate`` checks before anything is built.
``factory(params, ctx)`` (:class:`dmlplug.protocols.Factory`) is called only when a recipe (or
:func:`dmlplug.create`) builds the component; it imports torch / PML / timm inside its body (plugins load fast),
and what it returns is checked against the kind's Protocol (:data:`dmlplug.protocols.KIND_PROTOCOLS`).

Lifecycle hooks are notifications: they return nothing and are called on every registered plugin and
on the loggers of the current run (``on_bundle_exported``, called after ``dmlplug export``, returns a line to print).

The hooks are defined in :mod:`dmlplug.hookspecs.registration` (``register_<kind>``) and
:mod:`dmlplug.hookspecs.lifecycle` (the command line, the run's lifecycle, reports); this package is what the
plugin manager reads, and ``__all__`` lists every hook in the order of docs/hooks.md.
"""

from __future__ import annotations

from dmlplug.hookspecs.lifecycle import (
    on_bundle_exported,
    on_checkpoint,
    on_epoch_start,
    on_eval_end,
    on_run_end,
    on_run_start,
    on_step_end,
    register_commands,
    report_section,
    validate_file,
)
from dmlplug.hookspecs.registration import (
    hookspec,
    register_augmentations,
    register_backbones,
    register_datasets,
    register_distances,
    register_evaluators,
    register_heads,
    register_index_codecs,
    register_loggers,
    register_losses,
    register_lr_schedules,
    register_miners,
    register_optimizers,
    register_reducers,
    register_regularizers,
    register_rerankers,
    register_samplers,
    register_tune_pruners,
    register_tune_samplers,
)

#: Every hook, in the order of docs/hooks.md (``hookspec`` is the marker that declares one).
__all__ = [
    "register_backbones",
    "register_heads",
    "register_losses",
    "register_miners",
    "register_regularizers",
    "register_evaluators",
    "register_datasets",
    "register_samplers",
    "register_loggers",
    "register_distances",
    "register_reducers",
    "register_optimizers",
    "register_lr_schedules",
    "register_augmentations",
    "register_rerankers",
    "register_index_codecs",
    "register_tune_samplers",
    "register_tune_pruners",
    "register_commands",
    "on_run_start",
    "on_epoch_start",
    "on_step_end",
    "on_eval_end",
    "on_checkpoint",
    "on_run_end",
    "validate_file",
    "on_bundle_exported",
    "report_section",
    "hookspec",
]
