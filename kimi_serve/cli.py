"""The `kimi-serve` command line: a thin Typer layer over the core modules.

Each command converts its options into a call of a core function and renders the result; the only error handling is
the boundary in :func:`main`, which turns a :class:`KimiServeError` into one line on stderr and its exit code.
Nothing heavy (sglang, torch, jinja2, requests) is imported here: command modules import what they need lazily.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from typing import Any

import typer
from typer.exceptions import TyperException

from kimi_serve import __version__
from kimi_serve.commands import register_all
from kimi_serve.core.errors import WAIT_OPTION, ExitCode, KimiServeError, LockHeld, wait_hint


def _flags_take_no_value() -> None:
    """A flag (``--json``, ``--dry-run``, ``--help``) takes no value, so --help shows none: Typer's rich panel prints
    each option's type, ``<bool>`` for a flag too; a flag's type column is left empty, once, for every command."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag or self.count else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()

app = typer.Typer(
    name="kimi-serve",
    help="Serve Kimi-K2.5 with SGLang on 8x RTX PRO 6000 (SM120), and check that the server speaks Kimi's language:"
    " structured tool_calls and reasoning_content, not raw tokens.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
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
    what this one changes or takes (a lock), 130 interrupted (docs/exit-codes.md)."""


register_all(app)  # each concern's small module adds its commands; importing them must stay cheap


def _split_globals(args: list[str]) -> tuple[list[str], bool, bool]:
    """``--debug`` works in any position (it is moved to the front); ``--json`` anywhere asks for the envelope.
    Nothing after ``--`` (simulate's raw SGLang flags) is looked at."""
    cut = args.index("--") if "--" in args else len(args)
    head, sep, tail = args[:cut], args[cut : cut + 1], args[cut + 1 :]
    debug = "--debug" in head
    as_json = "--json" in head
    rest = [a for a in head if a != "--debug"]
    return (["--debug"] if debug else []) + rest + sep + tail, debug, as_json


def _usage_error(exc: Any) -> KimiServeError:
    """A click/typer usage error as the one-line error every other error is: where, what, and the fix (for a number
    out of range or of the wrong type, what is expected: "an integer 1..65535")."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "kimi-serve"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    param = getattr(exc, "param", None)
    lo, hi = getattr(param, "min", None), getattr(param, "max", None)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if param is not None and (lo is not None or hi is not None or annotation in (int, float)):
        kind = "an integer" if annotation is int else "a number"
        rng = f" {'' if lo is None else lo}..{'' if hi is None else hi}" if lo is not None or hi is not None else ""
        fix = f"pass {kind}{rng} to {'/'.join(getattr(param, 'opts', []) or [str(param.name)])}"
    else:
        fix = f"see '{where} --help'"
    return KimiServeError(message.replace("\n", " "), where=where, hint=fix, exit_code=ExitCode.USAGE)


def main(argv: list[str] | None = None) -> int:
    from typer._click.exceptions import NoArgsIsHelpError, UsageError

    args, debug, as_json = _split_globals(list(sys.argv[1:] if argv is None else argv))

    def fail(exc: BaseException, line: str, code: int, kind: str = "error") -> int:
        typer.echo(f"kimi-serve: {line}", err=True)
        if as_json:
            from kimi_serve.core.output import command_of, dumps, error_document

            command = command_of(args, groups=[g.name for g in app.registered_groups if g.name])
            typer.echo(dumps(error_document(command, exc, code=kind, exit_code=code)))
        return code

    try:
        rv = app(args=args, prog_name="kimi-serve", standalone_mode=False)
    except KimiServeError as exc:
        if debug:
            traceback.print_exc()
        if isinstance(exc, LockHeld):  # exit 75: --wait-lock named only to a command that has it
            with contextlib.suppress(Exception):  # the fix as raised stands if the command cannot be read
                exc.hint = wait_hint(WAIT_OPTION in options_of(args))
        return fail(exc, f"error: {exc.one_line()}", int(exc.exit_code))
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        return fail(KimiServeError("interrupted"), "interrupted", int(ExitCode.INTERRUPTED), "interrupted")
    except NoArgsIsHelpError as exc:  # `kimi-serve` or a group alone: its help, as documented
        exc.show()
        return int(ExitCode.USAGE)
    except (UsageError, TyperException) as exc:  # usage errors: unknown option, bad value, missing value, no command
        usage = _usage_error(exc)
        return fail(usage, f"error: {usage.one_line()}", int(ExitCode.USAGE), "usage")
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug in kimi-serve is not a verdict on the server
        if debug:
            traceback.print_exc()
        from kimi_serve.core.crashlog import save_crash_log

        saved = save_crash_log(__version__, args, traceback.format_exc())  # secrets redacted, 0600
        line = (
            f"internal error: {type(exc).__name__}: {exc} -- a bug in kimi-serve, not a verdict on the server "
            f"(traceback: {saved}; rerun with --debug to print it)"
        ).replace("\n", " ")
        return fail(exc, line, int(ExitCode.INTERNAL), "internal")
    return int(rv) if isinstance(rv, int) else 0


def options_of(args: list[str]) -> set[str]:
    """The options (``--wait-lock``, ``-q``, ...) of the command ``args`` runs, read from its own Typer params."""
    import typer.main

    cmd: Any = typer.main.get_command(app)
    for word in (a for a in args if not a.startswith("-")):
        sub = getattr(cmd, "commands", {}).get(word)
        if sub is None:
            break
        cmd = sub
    return {opt for param in cmd.params for opt in getattr(param, "opts", [])}


def entry() -> None:  # pragma: no cover - console script
    sys.exit(main())
