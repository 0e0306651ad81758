"""What the service commands (service_cmds.py) share: the one resolution of their options into a
:class:`~kimi_serve.service.target.ServiceTarget`, progress and notices, and how a result or a dry-run plan is
printed. What they do (the lock, the rollback of an interrupted change, the plan, the change) is one call each into
:mod:`kimi_serve.service.run`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kimi_serve.commands.options import emit

if TYPE_CHECKING:
    from kimi_serve.core.findings import Finding
    from kimi_serve.core.report import Fact
    from kimi_serve.service.install import Result
    from kimi_serve.service.target import ServiceTarget


def resolve(profile: str | None, sets: list[str] | None, unit_name: str | None, root: Path) -> ServiceTarget:
    """The command's options as one value: the profile loaded once (with ``--set``), the unit name, the root."""
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.service.systemctl import Systemd, run
    from kimi_serve.service.target import resolve_target

    loaded = load_profile(profile, sets or ()) if profile else None
    return resolve_target(loaded, unit_name, Systemd(run, root.resolve()))


def notice(message: str) -> None:
    """What the rollback of a killed change did: always said, on stderr."""
    typer.echo(f"kimi-serve: {message}", err=True)


def say(message: str) -> None:
    """Progress on a terminal only: scripts and tests get the result alone."""
    if sys.stderr.isatty():
        typer.echo(f"kimi-serve: {message}", err=True)


def print_result(
    result: Result, as_json: bool, extra: dict[str, Any] | None = None, command: str = "install-service"
) -> int:
    from kimi_serve.core.findings import FAIL, Finding
    from kimi_serve.core.report import to_json

    failed = [
        Finding("service", "step", FAIL, f"{s.action}: {s.detail}" if s.detail else s.action)
        for s in result.steps
        if s.outcome is FAIL
    ]
    return emit(
        as_json,
        result.exit_code,
        lambda: _result_text(result),
        command=command,
        data=lambda: {**to_json(result), **(extra or {})},
        findings=failed,
    )


def _result_text(result: Result) -> str | None:
    """Each step (`ok   write unit: ...`), then the verdict on the new unit and on the rollback."""
    from kimi_serve.core.report import action_lines

    lines = action_lines(result.steps)
    for label, outcome in (("new unit", result.new), ("rollback", result.rollback)):
        if outcome is not None:
            verdict = "PASSED" if outcome.ok else "FAILED"
            lines.append(
                f"{label}: {verdict} (profile {outcome.profile}, sha256 {outcome.unit_sha256[:12]}): {outcome.detail}"
            )
    return "\n".join(lines) or None  # nothing done, nothing said


def print_dry_run_plan(actions: list[str], bad: list[Finding]) -> None:
    """install-service --dry-run's tail, for one unit and for a deployment: the numbered actions, then the failing
    host checks that would make it refuse."""
    typer.echo("dry run: nothing was changed; install-service would:")
    for i, action in enumerate(actions, 1):
        typer.echo(f"  {i}. {action}")
    if bad:
        from kimi_serve.core.report import finding_lines

        typer.echo(f"on this host, {len(bad)} check(s) would fail (install-service would refuse):")
        typer.echo("\n".join(finding_lines(bad, indent="  ")))


def run_rows(runs: list[Any]) -> list[Fact]:
    """status's `up:` lines: one per run record, or a line saying none runs."""
    from kimi_serve.core.report import Fact

    return [Fact("up", r.line()) for r in runs] or [Fact("up", "no foreground `kimi-serve up` runs now")]
