"""install-service and uninstall-service, one body for every shape: the one unit, this host's rank of a multi-node
server, or the replica units and the router (:mod:`kimi_serve.service.member_units` renders them). Each member is
planned, journalled and written by :mod:`kimi_serve.service.install`'s steps; the verify timer watches the member
clients reach (the router, the one unit, rank 0). The restart is :mod:`kimi_serve.service.rolling`.

Every member gets its own intent journal, all written before the first change, so a kill at any step leaves each
member's journal behind and the next command rolls every one of them back (:func:`recover_fleet`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.check.owned_paths import refuse_owned_paths
from kimi_serve.core.findings import Finding
from kimi_serve.profile.deployment import Deployment, deployment_of
from kimi_serve.profile.member import Member, start_order, unit_member
from kimi_serve.service import monitor_units as mon
from kimi_serve.service.install import (
    Plan,
    Result,
    Verifier,
    journal_scope,
    planned_actions,
    reach_step,
    start_and_verify,
    start_monitor,
    warn_in,
    write_unit,
)
from kimi_serve.service.journal import journal_units, recover, sweep
from kimi_serve.service.marker import parse_marker, refuse_foreign
from kimi_serve.service.member_units import installed_members, render_members
from kimi_serve.service.preflight import check_for_service, host_step, refuse_other_profile, require_systemd
from kimi_serve.service.secret import needs_secret
from kimi_serve.service.state import STATE_DIR, ServicePaths, read_text
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.target import ServiceTarget
from kimi_serve.service.uninstall import uninstall
from kimi_serve.service.unit import UnitContext


@dataclass(frozen=True)
class Fleet:
    """What install-service and restart act on: the profile's deployment and a plan for each member this host runs.
    A single unit (or this host's rank of a multi-node server) is a deployment of one member; replicas come with the
    router. Its shape (routed, the router, the replicas) is the deployment's."""

    deployment: Deployment
    base: str  # the deployment's name, NAME.service: the one unit itself, or the stem of NAME-r0, ..., NAME-router
    plans: dict[Member, Plan]  # the one unit; or the local replicas in index order, then the router
    findings: tuple[Finding, ...]
    now: bool

    @property
    def first(self) -> Plan:
        """The first member's plan (the one unit's); it creates the key file when one is to be created."""
        return next(iter(self.plans.values()))

    def to_json(self) -> list[dict[str, Any]]:
        """``deployment`` in the reports: each member's role, index, unit and endpoint."""
        return [
            {"role": m.role.value, "index": m.index, "unit": plan.unit.name, "endpoint": m.endpoint}
            for m, plan in self.plans.items()
        ]


def plan_fleet(
    target: ServiceTarget,
    *,
    now: bool,
    ctx: UnitContext,
    environ: Mapping[str, str],
    contract: bool = False,
    replace: bool = True,
    preview: bool = False,
) -> Fleet:
    """Check the target's profile once, render every unit it needs on this host and have systemd-analyze verify them
    side by side; change nothing under the root. ``replace`` False refuses a unit another profile installed;
    ``preview`` (--dry-run) lists host failures in ``findings`` instead of raising them."""
    from kimi_serve.core.errors import ExitCode, KimiServeError

    systemd, root, base, profile = target.systemd, target.systemd.root, target.unit, target.profile
    assert profile is not None, "install-service and restart resolve a profile"
    if now and not systemd.live:
        raise KimiServeError(
            "--now needs the running system, not --root", where="--now", hint="drop --now, or drop --root"
        )
    refuse_owned_paths(profile, root)  # before the slow layers; symlinks resolved inside the root
    found: list[Finding] = []
    host_step(preview, found, lambda: require_systemd(systemd), None)  # before anything slow or written
    # the key file first: before the slow layers and any contract run (whether to create it: the first member's)
    create = host_step(preview, found, lambda: needs_secret(profile, ServicePaths(root, base), environ), False)
    launch, findings = check_for_service(profile, contract=contract, preview=preview)
    ctx = ctx.for_engine(launch.argv[0])  # an engine that carries kimi-serve: the units run from it alone
    found += [f for f in (ctx.engine_drift(),) if f is not None]
    deployment = deployment_of(profile, launch, pythonpath=ctx.package_root)
    members = render_members(deployment, ctx, base)
    if not members:
        raise KimiServeError(
            "the profile has no replica on this host and no router",
            where="router.workers",
            hint="check replicas: and router.workers",
            exit_code=ExitCode.USAGE,
        )
    reach_step(profile, [deployment.launches[m] for m in members], ctx, systemd, environ, preview, found)
    # the verify timer checks what clients reach: the router, the one unit, rank 0; none on a rank >= 1
    front = deployment.front
    launch = deployment.launches[front] if front is not None else launch
    monitor = None if front is None else mon.render_monitor(profile, launch, ctx, members[front].name)
    plans: dict[Member, Plan] = {}
    for m, unit in members.items():
        paths = ServicePaths(root, unit.name)
        # nothing it writes (the journal beside the records too) may be reached through a link out of the root
        mon.refuse_links(monitor if m is front else None, paths)
        refuse_foreign(paths.unit_file)
        if m is front:
            mon.refuse_foreign_monitor(paths)
        if not replace:
            current = read_text(paths.unit_file)
            marker = parse_marker(current) if current is not None else None
            host_step(
                preview,
                found,
                lambda p=paths, mk=marker: refuse_other_profile(  # type: ignore[misc]
                    str(p.unit_file), mk.profile if mk else None, profile.name
                ),
                None,
            )
        # the first member creates the key file when one is to be created; the front carries the timer
        plans[m] = Plan(profile, unit, paths, create and not plans, now, monitor if m == front else None)
    units = [*members.values(), *(monitor.files if monitor else ())]
    host_step(preview, found, lambda: mon.analyze_together(systemd, units), None)
    return Fleet(deployment, base, plans, tuple(findings + found), now)


def fleet_actions(fleet: Fleet, systemd: Systemd) -> list[str]:
    """What installing ``fleet`` does, member by member (``--dry-run`` prints these)."""
    actions: list[str] = []
    for m, plan in fleet.plans.items():
        prefix = f"[{m.label}] " if fleet.deployment.routed else ""
        actions += [prefix + a for a in planned_actions(plan, systemd)]
    return actions


def install_fleet(fleet: Fleet, systemd: Systemd, verifier: Verifier, environ: Mapping[str, str]) -> Result:
    """install-service's one body: write every member (each journalled, all journals first), enable them; with
    ``now`` start them one by one (the replicas, then the router), each gated by its ExecStartPost, then verified
    from outside, and start the verify timer."""
    from kimi_serve.core.errors import ExitCode

    result = Result(fleet.base)
    warn_in(result, fleet.findings)
    root, routed = fleet.first.paths.root, fleet.deployment.routed
    if routed:
        planned = {p.paths.unit for p in fleet.plans.values()}
        for unit in reversed(installed_members(root, fleet.base).values()):  # replicas the profile no longer has
            if unit not in planned:
                result.steps += uninstall(ServicePaths(root, unit), systemd, dry_run=False).steps
    with journal_scope(list(fleet.plans.values()), systemd, "install-service"):
        for plan in fleet.plans.values():
            write_unit(plan, systemd, result, environ)
        if not fleet.now:
            return result
        failed = None
        for m, plan in fleet.plans.items():
            label = f" ({m.label})" if routed else ""  # a report line names a member of a deployment
            outcome = start_and_verify(plan.candidate, plan.paths, systemd, verifier, result, label=label)
            if not outcome.ok and failed is None:
                failed = outcome
            result.new = failed or outcome
            start_monitor(plan, systemd, result)  # whatever the outcome: a failing server is what the timer reports
        assert result.new is not None
        if result.new.internal:
            result.exit_code = ExitCode.INTERNAL
        elif not result.new.ok:
            result.exit_code = ExitCode.FAILED
            result.add(
                "outcome",
                "failed",
                "a member did not pass (above); the others run. `kimi-serve restart` rolls a failed replica back to "
                "its last good unit"
                if routed
                else "the new unit did not pass; `kimi-serve restart` would have rolled back (the unit before this "
                f"install is kept at {fleet.first.paths.previous_unit})",
            )
    return result


def members_of(root: Path, base: str) -> list[str]:
    """The units kimi-serve wrote for ``base`` under ``root``, in install order: a deployment's members (replicas in
    index order, then the router; a member whose unit is gone but whose records are left, by an uninstall killed
    part-way, too), else the one unit ``base`` itself: a single unit is a deployment of one member."""
    state = root / STATE_DIR
    names = {unit.removesuffix(".service") for unit in installed_members(root, base).values()}
    names |= {d.name for d in (state.iterdir() if state.is_dir() else ()) if d.is_dir()}
    members = {n: m for n in names if (m := unit_member(base, n)) is not None}
    return [f"{n}.service" for n in sorted(members, key=lambda n: start_order(*members[n]))] or [base]


def uninstall_fleet(root: Path, base: str, systemd: Systemd, *, dry_run: bool) -> Result:
    """uninstall-service's one body: every member, the router first (clients stop arriving before the replicas go);
    the single unit when ``base`` is one."""
    result = Result(base)
    for unit in reversed(members_of(root, base)):
        part = uninstall(ServicePaths(root, unit), systemd, dry_run=dry_run)
        result.steps += part.steps
    return result


def recover_fleet(systemd: Systemd, base: str, *, keep_secret: bool = False) -> list[str]:
    """Settle every change a killed command left (the intent journals) of ``base``: its own (the single unit), then
    its members', the router first, then the replicas from the highest index: the reverse of the order they were
    journalled in. A change that had changed every unit is finished (its journals removed), any other rolled back
    (:func:`kimi_serve.service.journal.recover`; ``keep_secret``: a key file it created stays). First the temporary
    files of killed atomic writes of any member are removed. The single unit's message as it is; a member's prefixed
    with its unit."""
    root = systemd.root
    journalled = journal_units(root, base)
    for unit in {base, *members_of(root, base), *journalled}:
        sweep(ServicePaths(root, unit))
    messages = []
    for unit in journalled:
        message = recover(ServicePaths(root, unit), systemd, keep_secret=keep_secret)
        if message:
            messages.append(message if unit == base else f"{unit}: {message}")
    return messages
