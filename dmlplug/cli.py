"""The ``dmlplug`` command line (typer).

Every user error is a :class:`~dmlplug.errors.DmlplugError`: :func:`main` prints its message and exits
with status 2; a command-line mistake prints typer's usage message and exits with status 2 too; a
traceback is shown only with ``--debug`` (accepted anywhere on the command line).
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from typing import Annotated, Any

import typer

from dmlplug.errors import DmlplugError

_STATE = {"debug": False}


def _print_version(value: bool) -> None:
    """Print the version and stop; eager, so that ``dmlplug --version`` needs no command."""
    if value:
        from dmlplug.distributions import DMLPLUG_VERSION

        typer.echo(f"dmlplug {DMLPLUG_VERSION}")
        raise typer.Exit()


def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks on errors (allowed anywhere).")]
    = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True,
                                          callback=_print_version)] = False,
) -> None:
    """Plugin-based deep metric learning: train and evaluate image-retrieval embeddings from TOML recipes."""
    _STATE["debug"] = _STATE["debug"] or debug or os.environ.get("DMLPLUG_DEBUG") == "1"


def build_app(command: str | None = None) -> typer.Typer:
    """The CLI application: the root options, then every ``register_commands`` (core commands first).

    Args:
        command: The command about to run (``"validate"``, ``"tune"`` …): the application then holds it alone,
            when some plugin added it. typer turns every command into a click command before it parses anything,
            reading each function's signature and type hints; for one command that is most of the work of the
            sixty, and nothing else would see the others. ``None``, or a name nobody added, keeps every command
            (``--help``, and click's "no such command" with its suggestion).
    """
    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Plugin-based deep metric learning.")
    app.callback()(_root)
    from dmlplug import commands
    from dmlplug.plugins import get_host

    host = get_host()
    if not host.pm.is_registered(commands):
        host.pm.register(commands, name="dmlplug.commands")
    # Commands are added in registration order: the core commands first in --help.
    host.call_each("register_commands", lambda plugin: {"app": app})
    if command is not None:
        _keep_only(app, command)
    return app


def _keep_only(app: typer.Typer, command: str) -> None:
    """Drop from ``app`` every command and command group not named ``command``, if one is."""
    from typer.main import get_command_name

    commands = [info for info in app.registered_commands
                if (info.name or get_command_name(info.callback.__name__ if info.callback else "")) == command]
    groups = [info for info in app.registered_groups
              if (info.name or (info.typer_instance.info.name if info.typer_instance else None)) == command]
    if commands or groups:
        app.registered_commands, app.registered_groups = commands, groups


def _command_name(args: list[str]) -> str | None:
    """The command of a command line: its first argument, when no root option comes before it."""
    return args[0] if args and not args[0].startswith("-") else None


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning user errors into one message and a non-zero exit.

    Command-line mistakes (a missing argument, an unknown option or command, an extra argument) are
    usage errors: typer's usage line and message, exit status 2. ``--debug`` is taken from anywhere
    before a ``--``, so ``dmlplug run r.toml --debug`` works as well as ``dmlplug --debug run r.toml``.
    """
    args, debug = split_debug(sys.argv[1:] if argv is None else list(argv))
    _STATE["debug"] = debug or os.environ.get("DMLPLUG_DEBUG") == "1"
    try:
        app = build_app(_command_name(args))
        code = app(args=args, prog_name="dmlplug", standalone_mode=False)
    except DmlplugError as exc:
        _fail(exc, f"error: {exc.render()}", exc.exit_code)
    except typer.Exit as exc:
        _exit(exc.exit_code)
    except typer.TyperException as exc:  # click's ClickException, UsageError and subclasses (vendored by typer)
        _show_click_error(exc)
    except (typer.Abort, EOFError):
        _fail(None, "aborted", 130)
    except KeyboardInterrupt:
        _fail(None, "interrupted", 130)
    except Exception as exc:
        _fail(exc, f"internal error: {type(exc).__name__}: {exc}\n  (rerun with --debug for the traceback; "
                   "please report it)", 1)
    else:
        # Without standalone mode, typer returns the code of a ``typer.Exit`` raised by a command.
        if isinstance(code, int) and not isinstance(code, bool):
            _exit(code)


def split_debug(args: list[str]) -> tuple[list[str], bool]:
    """``args`` without any ``--debug`` before a ``--`` separator, and whether one was there.

    Args:
        args: The command-line arguments, without the program name.

    Returns:
        The arguments to parse and whether debugging was asked for.
    """
    end = args.index("--") if "--" in args else len(args)
    head = [a for a in args[:end] if a != "--debug"]
    return head + args[end:], len(head) != end


def _exit(code: int | None) -> None:
    if code:
        sys.exit(code)


def _show_click_error(exc: Any) -> None:
    """Print a click error as typer would in standalone mode (usage, hint, message) and exit with its code."""
    if _STATE["debug"]:
        traceback.print_exception(exc)
    suggestion = _command_suggestion(exc)
    if suggestion:
        exc.message = f"{exc.message} {suggestion}"
    show = getattr(exc, "show", None)
    if show is not None:
        show()
    else:
        print(f"Error: {exc}", file=sys.stderr)
    sys.exit(getattr(exc, "exit_code", 2))


def _command_suggestion(exc: Exception) -> str:
    """'Did you mean ...?' for an unknown command, which click reports without the closest name."""
    import difflib

    ctx = getattr(exc, "ctx", None)
    message = str(getattr(exc, "message", ""))
    match = re.match(r"No such command '(.+)'", message)
    if ctx is None or match is None or not hasattr(ctx.command, "list_commands"):
        return ""
    close = difflib.get_close_matches(match.group(1), ctx.command.list_commands(ctx), n=1)
    return f"Did you mean '{close[0]}'?" if close else ""


def _fail(exc: Any, message: str, code: int) -> None:
    if _STATE["debug"] and exc is not None:
        traceback.print_exception(exc)
    print(message, file=sys.stderr)
    sys.exit(code)
