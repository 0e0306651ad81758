"""`kimi-serve logs`: the right log for a profile: the journal of its systemd unit when one is installed, else the
newest log file `up` wrote for it (docs/up.md)."""

from __future__ import annotations

import sys

import typer

from kimi_serve.commands.options import UnitOpt
from kimi_serve.core.errors import ExitCode, KimiServeError


def journal_argv(unit: str, lines: int, follow: bool) -> list[str]:
    return ["journalctl", "-u", unit, "-n", str(lines), "-o", "cat"] + (["-f"] if follow else ["--no-pager"])


def logs(
    profile: str | None = typer.Option(
        None,
        "--profile",
        "-p",
        help="Profile NAME or PATH (default: the newest `up` log of any profile, or the default unit's journal).",
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines (Ctrl-C stops)."),
    lines: int = typer.Option(50, "--lines", "-n", min=0, max=1_000_000, help="Lines of history to print first."),
    unit_name: str | None = UnitOpt,
    up: bool = typer.Option(False, "--up", help="Show `up`'s log file even when the unit is installed."),
) -> int:
    """Show the server's log: journald for the installed service, `up`'s log file otherwise."""
    import os
    import shutil
    from pathlib import Path

    from kimi_serve.profile.loader import load_profile
    from kimi_serve.service.state import ServicePaths
    from kimi_serve.service.target import unit_of
    from kimi_serve.up import logfiles

    loaded = load_profile(profile) if profile else None
    unit = unit_of(loaded, unit_name)
    if not up and ServicePaths(Path("/"), unit).unit_file.exists():
        if shutil.which("journalctl") is None:
            raise KimiServeError(
                "journalctl not found",
                where=unit,
                hint="install systemd's journalctl, or pass --up",
                exit_code=ExitCode.ENVIRONMENT,
            )
        typer.echo(f"==> journal of {unit} <==", err=True)
        argv = journal_argv(unit, lines, follow)
        os.execvp(argv[0], argv)  # journalctl takes over: its paging, following and exit status
    name = loaded.name if loaded else None
    if name:
        found = logfiles.up_logs(name)
    else:
        found = sorted(logfiles.log_dir().glob("up-*.log"), key=lambda p: p.stat().st_mtime)
    if not found:
        where = f"profile {name}" if name else str(logfiles.log_dir())
        raise KimiServeError(
            f"no `up` log found in {logfiles.log_dir()} and no unit {unit} installed",
            where=where,
            hint=f"start it with kimi-serve up -p {profile or 'NAME'}",
            exit_code=ExitCode.FAILED,
        )
    path = found[-1]
    typer.echo(f"==> {path} <==", err=True)
    try:
        end = logfiles.tail(path, lines, sys.stdout)  # read from the end: memory independent of the log's size
        if follow:
            logfiles.follow(path, sys.stdout, start=end)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # the reader went away (`logs | head`): what is left goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        raise KimiServeError(
            f"cannot read the log {path}: {exc.strerror or exc}",
            where=str(path),
            hint="run as the user that ran `up`, or pass --profile",
            exit_code=ExitCode.FAILED,
        ) from None
    return 0


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)
