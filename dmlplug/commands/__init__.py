"""The host's commands of the ``dmlplug`` command line, added through the ``register_commands`` hook.

The host registers this package with the plugin manager before any plugin (pytest registers its own core
the same way), so built-in, third-party and core commands are all added by one mechanism: module-level
``cmd_<name>`` functions with ``Annotated`` parameters, added with ``app.command("name")(cmd_name)``.

* :mod:`dmlplug.commands.core`: run, validate, plugins, list, report, doctor and ``plugin new``.
* :mod:`dmlplug.commands.bundle`: export, calibrate, embed and search (deployment, ``dmlplug/bundle/``).
* :mod:`dmlplug.commands.index`: index, index-add and index-remove (``dmlplug/bundle/index*.py``).
* :mod:`dmlplug.commands.options`: the arguments and options several commands share.

Only typer is imported at module level: torch comes with the command that runs, so ``dmlplug --help``
stays fast. Being part of the host, these modules may use the host's private modules; plugins may not.
"""

from __future__ import annotations

import pluggy
import typer

hookimpl = pluggy.HookimplMarker("dmlplug")


@hookimpl(tryfirst=True)
def register_commands(app: typer.Typer) -> None:
    """Add the core commands: run, validate, plugins, list, report, doctor, ``plugin new`` and deployment's.

    Args:
        app: The root ``typer.Typer`` application of the ``dmlplug`` command line.
    """
    from dmlplug.commands import bundle, core, index

    app.command("run")(core.cmd_run)
    app.command("validate")(core.cmd_validate)
    app.command("plugins")(core.cmd_plugins)
    app.command("list")(core.cmd_list)
    app.command("report")(core.cmd_report)
    app.command("doctor")(core.cmd_doctor)
    plugin_app = typer.Typer(no_args_is_help=True, help="Tools for plugin authors.")
    plugin_app.command("new")(core.cmd_plugin_new)
    app.add_typer(plugin_app, name="plugin")
    app.command("export")(bundle.cmd_export)
    app.command("calibrate")(bundle.cmd_calibrate)
    app.command("embed")(bundle.cmd_embed)
    app.command("index")(index.cmd_index)
    app.command("index-add")(index.cmd_index_add)
    app.command("index-remove")(index.cmd_index_remove)
    app.command("search")(bundle.cmd_search)
