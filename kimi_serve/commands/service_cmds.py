"""`install-service`, `uninstall-service`, `restart`, `status` and `keyfile` (the service's API-key file): the systemd
service (docs/systemd.md). Each resolves its options once (:func:`resolve`) and makes one call into
:mod:`kimi_serve.service.run` (the lock, the rollback of an interrupted change, the plan, the change)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kimi_serve.commands.options import (
    JsonOpt,
    ProfileOpt,
    SetOpt,
    UnitOpt,
    UnitOrDefaultOpt,
    UnitProfileOpt,
    emit,
)
from kimi_serve.core.findings import FAIL, PASS, Finding
from kimi_serve.core.report import Fact, action_lines, fact_lines, finding_lines, to_json
from kimi_serve.core.settings import process_environ, state_root
from kimi_serve.service.state import STATE_DIR, UNIT_DIR

if TYPE_CHECKING:
    from kimi_serve.service.fleet import Fleet
    from kimi_serve.service.install import Result
    from kimi_serve.service.target import ServiceTarget

# --root per command: what that command does under it (each names its own verb)
ROOT_HELP = (
    f"Install under this directory instead of / (unit in ROOT/{UNIT_DIR}, records in ROOT/{STATE_DIR}; only "
    "offline systemctl)."
)
UNINSTALL_ROOT_HELP = (
    f"Remove the unit and its records under this directory instead of / (ROOT/{UNIT_DIR}, ROOT/{STATE_DIR}; only "
    "offline systemctl)."
)
STATUS_ROOT_HELP = (
    f"Read the unit and its records under this directory instead of / (ROOT/{UNIT_DIR}, ROOT/{STATE_DIR}); another "
    "root is not the running system: its unit state is not queried."
)
RootOpt = typer.Option(Path("/"), "--root", help=ROOT_HELP)
WAIT_LOCK_HELP = (
    "When another kimi-serve command holds the lock of this root (the host lock for /), wait for it instead of "
    "exiting 75."
)


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
    lines = action_lines(result.steps)
    for label, outcome in (("new unit", result.new), ("rollback", result.rollback)):
        if outcome is not None:
            verdict = "PASSED" if outcome.ok else "FAILED"
            lines.append(
                f"{label}: {verdict} (profile {outcome.profile}, sha256 {outcome.unit_sha256[:12]}): {outcome.detail}"
            )
    return "\n".join(lines) or None  # nothing done, nothing said


def install_service(
    profile: str = ProfileOpt,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the unit, the secret file's path and each action; change nothing."
    ),
    now: bool = typer.Option(False, "--now", help="Also restart the unit and wait until its contract check passed."),
    unit_name: str | None = UnitOpt,
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
    wait_lock: bool = typer.Option(False, "--wait-lock", help=WAIT_LOCK_HELP),
    sets: list[str] | None = SetOpt,
    replace: bool = typer.Option(
        False, "--replace", help="Replace a unit of the same name that another profile installed (refused otherwise)."
    ),
    node_rank: int | None = typer.Option(
        None, "--node-rank", min=0, help="This host's rank in a multi-node profile (same as --set nodes.rank=R)."
    ),
) -> int:
    """Check the profile, render and verify its systemd unit, write it (keeping the previous one) and enable it.

    A profile with replicas > 1 installs one unit per replica (NAME-r0, NAME-r1, ...) and the router (NAME-router);
    a multi-node profile installs this host's rank (docs/scale-out.md).

    The API key never goes into the unit: SGLang reads it from the profile's server.api_key_file (0600), which this
    command creates from $KIMI_SERVE_API_KEY when it does not exist yet.
    """
    from kimi_serve.service.run import install_service as install
    from kimi_serve.service.run import plan
    from kimi_serve.service.verifier import contract_verifier

    sets = [*(sets or []), *([f"nodes.rank={node_rank}"] if node_rank is not None else [])]
    target = resolve(profile, sets, unit_name, root)
    if dry_run:
        preview = plan(target, process_environ(), now=now, contract=False, replace=replace, preview=True, say=say)
        return _print_plan(preview, target, as_json)
    done = install(
        target,
        contract_verifier,
        process_environ(),
        now=now,
        replace=replace,
        wait_lock=wait_lock,
        say=say,
        notice=notice,
    )
    return print_result(done.result, as_json, done.extra())


def _print_plan(fleet: Fleet, target: ServiceTarget, as_json: bool) -> int:
    """Every member's unit, the secret file and the actions; then the host checks that would fail (exit 1 when any
    would)."""
    from kimi_serve.service.fleet import fleet_actions

    actions = fleet_actions(fleet, target.systemd)
    bad = [f for f in fleet.findings if f.status == FAIL]
    code = 1 if bad else 0
    first, secret = fleet.first, fleet.deployment.profile.server.api_key_file
    rooted = first.paths.under_root(secret) if secret else None  # where it is under --root, as the actions say
    secret_note = (
        "none (no server.api_key_file)"
        if rooted is None
        else f"{rooted} (will be created from $KIMI_SERVE_API_KEY, mode 0600)"
        if first.create_secret
        else f"{rooted} (exists, 0600; content not shown)"
        if rooted.exists()
        else f"{rooted} (missing: see the failing checks below)"
    )
    units = [
        {"unit": p.unit.name, "unit_file": str(p.paths.unit_file), "unit_text": p.unit.text}
        for p in fleet.plans.values()
    ]
    data = {
        "dry_run": True,
        "unit": fleet.base,
        "unit_file": units[0]["unit_file"],  # the one unit's (a deployment's first member's; all under units)
        "unit_text": units[0]["unit_text"],
        "deployment": fleet.to_json(),
        "units": units,
        "secret_file": secret,
        "create_secret": first.create_secret,
        "actions": actions,
    }

    def text() -> None:
        for plan in fleet.plans.values():
            typer.echo(f"# {plan.paths.unit_file}")
            typer.echo(plan.unit.text, nl=False)
            typer.echo("")
        typer.echo(f"secret file: {secret_note}")
        typer.echo("dry run: nothing was changed; install-service would:")
        for i, action in enumerate(actions, 1):
            typer.echo(f"  {i}. {action}")
        if bad:
            typer.echo(f"on this host, {len(bad)} check(s) would fail (install-service would refuse):")
            typer.echo("\n".join(finding_lines(bad, indent="  ")))

    return emit(as_json, code, text, command="install-service", data=data, findings=fleet.findings)


def uninstall_service(
    profile: str | None = UnitProfileOpt,
    unit_name: str | None = UnitOrDefaultOpt,
    root: Path = typer.Option(Path("/"), "--root", help=UNINSTALL_ROOT_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print each action; change nothing."),
    as_json: bool = JsonOpt,
    wait_lock: bool = typer.Option(False, "--wait-lock", help=WAIT_LOCK_HELP),
    sets: list[str] | None = SetOpt,
) -> int:
    """Stop, disable and remove the unit and its records (the API-key file stays); every member of a deployment,
    the router first."""
    from kimi_serve.service.run import uninstall_service as uninstall

    target = resolve(profile, sets, unit_name, root)
    result = uninstall(target, dry_run=dry_run, wait_lock=wait_lock, notice=notice)
    return print_result(result, as_json, command="uninstall-service")


def restart(
    profile: str = ProfileOpt,
    unit_name: str | None = UnitOpt,
    as_json: bool = JsonOpt,
    wait_lock: bool = typer.Option(False, "--wait-lock", help=WAIT_LOCK_HELP),
    sets: list[str] | None = SetOpt,
    prewarm: bool = typer.Option(
        False,
        "--prewarm",
        help="First read the checkpoint into the page cache while the "
        "old server still serves (kimi-serve prewarm; a refusal is a note, not an error).",
    ),
    replica: list[int] | None = typer.Option(
        None,
        "--replica",
        min=0,
        help="Replicated deployment: roll only this replica (repeatable; in the order given). Default: all, in order.",
    ),
) -> int:
    """Check, install the new unit, restart, verify; on failure restore the last unit that passed verify.

    A replicated deployment restarts one replica at a time, only while the router reports another healthy worker,
    and stops the roll at the first replica that fails (rolled back). A crash of kimi-serve's own verify (exit 70)
    is no verdict, so it never triggers a rollback."""
    from kimi_serve.commands.prewarm_cmd import restart_prewarm
    from kimi_serve.service.run import restart_service
    from kimi_serve.service.verifier import contract_verifier

    target = resolve(profile, sets, unit_name, Path("/"))
    first = restart_prewarm(target.profile, say) if prewarm and target.profile else None
    done = restart_service(
        target,
        contract_verifier,
        process_environ(),
        only=list(replica or []),
        wait_lock=wait_lock,
        prewarm=first,
        say=say,
        notice=notice,
    )
    return print_result(done.result, as_json, done.extra(), command="restart")


def status(
    profile: str | None = UnitProfileOpt,
    unit_name: str | None = UnitOrDefaultOpt,
    root: Path = typer.Option(Path("/"), "--root", help=STATUS_ROOT_HELP),
    as_json: bool = JsonOpt,
    sets: list[str] | None = SetOpt,
) -> int:
    """The unit's state, the live profile and patch set, the last verify, and /health now (exit 0: active, healthy).

    A replicated deployment: the router, its workers and every replica. Nothing installed and a foreground `up` (of
    --profile) running: that `up`, looked at now: /health, serving through the router or degraded (exit 0: whole)."""
    from kimi_serve.prewarm.report import start_history, start_rows
    from kimi_serve.service.run import service_status

    target = resolve(profile, sets, unit_name, root)
    st, runs = service_status(target)

    def data() -> dict[str, Any]:
        starts = start_history(state_root(), profile=target.profile.name if target.profile else None)
        return {**st.to_json(), "starts": starts, "runs": [r.to_json() for r in runs]}

    def text() -> str:
        ups = [Fact("up", r.line()) for r in runs] or [Fact("up", "no foreground `kimi-serve up` runs now")]
        return "\n".join(fact_lines([*st.rows(), *start_rows(target.profile, state_root()), *ups]))

    return emit(as_json, st.exit_code, text, command="status", data=data, findings=st.findings())


KEYFILE_ROOT_HELP = "Write the key file under this directory instead of / (as install-service --root)."


def keyfile(
    profile: str = ProfileOpt,
    sets: list[str] | None = SetOpt,
    root: Path = typer.Option(Path("/"), "--root", help=KEYFILE_ROOT_HELP),
    as_json: bool = JsonOpt,
) -> int:
    """Write the profile's API-key file (server.api_key_file) as install-service does: its folders created, mode 0600,
    the clients' api-key from $KIMI_SERVE_API_KEY (else the file's own, else a new random one) and a distinct random
    admin-api-key (kept when the file has one). Running it again changes nothing; no key is ever printed."""
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.service.secret import write_profile_key_file

    result = write_profile_key_file(load_profile(profile, sets or ()), root.resolve(), process_environ())

    done = Finding("service", "keyfile", PASS, result.message())
    return emit(as_json, 0, result.message, command="keyfile", data=result, findings=[done])


def register(app: typer.Typer) -> None:
    app.command("keyfile")(keyfile)
    app.command("install-service")(install_service)
    app.command("uninstall-service")(uninstall_service)
    app.command("restart")(restart)
    app.command("status")(status)
