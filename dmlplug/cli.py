"""The ``dmlplug`` command line (typer).

Every user error is a :class:`~dmlplug.errors.DmlplugError`: :func:`main` prints its message and exits
with status 2; a traceback is shown only with ``--debug``.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Annotated, Any

import typer

from dmlplug.errors import DmlplugError

_STATE = {"debug": False}


def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    """Plugin-based deep metric learning: train and evaluate image-retrieval embeddings from TOML recipes."""
    _STATE["debug"] = debug or os.environ.get("DMLPLUG_DEBUG") == "1"
    if version:
        from dmlplug import __version__

        typer.echo(f"dmlplug {__version__}")
        raise typer.Exit()


def build_app() -> typer.Typer:
    """The CLI application: the root options, then every ``register_commands`` (core commands first)."""
    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Plugin-based deep metric learning.")
    app.callback()(_root)
    from dmlplug import commands
    from dmlplug.plugins import get_host

    host = get_host()
    if not host.pm.is_registered(commands):
        host.pm.register(commands, name="dmlplug.commands")
    # pluggy calls later-registered implementations first; tryfirst puts the core commands before them all.
    for impl in reversed(host.pm.hook.register_commands.get_hookimpls()):
        try:
            impl.function(app=app)
        except Exception as exc:  # a broken plugin must not take the CLI down
            record = host.records.get(impl.plugin_name)
            if record is None:
                raise
            record.error = f"register_commands failed: {type(exc).__name__}: {exc}"
    return app


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning user errors into one message and a non-zero exit."""
    import click

    args = sys.argv[1:] if argv is None else argv
    _STATE["debug"] = "--debug" in args or os.environ.get("DMLPLUG_DEBUG") == "1"
    try:
        app = build_app()
        app(args=args, prog_name="dmlplug", standalone_mode=False)
    except DmlplugError as exc:
        _fail(exc, f"error: {exc.render()}", exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _fail(None, "aborted", 130)
    except KeyboardInterrupt:
        _fail(None, "interrupted", 130)
    except Exception as exc:
        _fail(exc, f"internal error: {type(exc).__name__}: {exc}\n  (rerun with --debug for the traceback; "
                   "please report it)", 1)


def _fail(exc: Any, message: str, code: int) -> None:
    if _STATE["debug"] and exc is not None:
        traceback.print_exception(exc)
    print(message, file=sys.stderr)
    sys.exit(code)
