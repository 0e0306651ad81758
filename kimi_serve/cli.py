"""The `kimi-serve` command line: a thin Typer layer over the core modules.

Each command converts its options into a call of a core function and renders the result; the only error handling is
the boundary in :func:`main`, which turns a :class:`KimiServeError` into one line on stderr and its exit code.
Nothing heavy (sglang, torch, jinja2, requests) is imported here: command modules import what they need lazily.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import typer
from typer.exceptions import TyperException

from kimi_serve import __version__
from kimi_serve.core.errors import ExitCode, KimiServeError

app = typer.Typer(
    name="kimi-serve",
    help="Serve Kimi-K2.5 with SGLang on 8x RTX PRO 6000 (SM120), and check that the server speaks Kimi's language:"
    " structured tool_calls and reasoning_content, not raw tokens.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kimi-serve {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Exit codes: 0 ok, 1 check or contract failed, 2 invalid input, 3 server unreachable or not ready,
    4 server exited, 5 host cannot do it, 70 internal error (a kimi-serve bug), 75 another kimi-serve command holds
    the host lock, 130 interrupted (docs/exit-codes.md)."""


def _register_commands() -> None:
    # Each concern owns a small module that adds its commands; importing them must stay cheap.
    from kimi_serve.commands import register_all

    register_all(app)


_register_commands()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        rv = app(args=args, prog_name="kimi-serve", standalone_mode=False)
    except KimiServeError as exc:
        if debug:
            traceback.print_exc()
        typer.echo(f"kimi-serve: error: {exc.one_line()}", err=True)
        return int(exc.exit_code)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        typer.echo("kimi-serve: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except TyperException as exc:  # usage errors: unknown option, missing value, no command
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            typer.echo(f"kimi-serve: error: {exc.message}", err=True)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        typer.echo("kimi-serve: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug in kimi-serve is not a verdict on the server
        if debug:
            traceback.print_exc()
        saved = _save_traceback(args)
        typer.echo(f"kimi-serve: internal error: {type(exc).__name__}: {exc} -- a bug in kimi-serve, not a verdict on "
                   f"the server (traceback: {saved}; rerun with --debug to print it)".replace("\n", " "), err=True)
        return int(ExitCode.INTERNAL)
    return int(rv) if isinstance(rv, int) else 0


def _save_traceback(args: list[str]) -> str:
    """Write the current exception's traceback under the state root (else the temp dir); return where it went."""
    import tempfile
    import time

    from kimi_serve.core.settings import state_root

    text = f"kimi-serve {__version__} {' '.join(args)}\n{traceback.format_exc()}"
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (state_root() / "crash", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            return str(folder / name)
        except OSError:
            continue
    return "not saved (no writable directory)"


def entry() -> None:  # pragma: no cover - console script
    sys.exit(main())
