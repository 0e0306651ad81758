"""The service commands' one call each (`install-service`, `uninstall-service`, `restart`, `status`), on the
:class:`~kimi_serve.service.target.ServiceTarget` the command resolved from its options: systemd required before
anything is locked or written, the root's lock, the rollback of a change killed part-way (:func:`recover`), the plan
(:func:`~kimi_serve.service.fleet.plan_fleet`), then the change itself. Never prints: progress goes to ``say`` (the
command shows it on a terminal only), what the rollback did to ``notice`` (always shown); the command renders the
result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.lock import root_lock
from kimi_serve.core.runs import Run, prune, read_runs
from kimi_serve.core.settings import current
from kimi_serve.service.fleet import Fleet, install_fleet, plan_fleet, recover_fleet, uninstall_fleet
from kimi_serve.service.fleet_status import FleetStatus, status_of
from kimi_serve.service.foreground import ForegroundStatus, foreground_of, runs_of
from kimi_serve.service.install import Result, Verifier
from kimi_serve.service.preflight import require_systemd
from kimi_serve.service.rolling import no_replica_to_pick, restart_deployment
from kimi_serve.service.status import Status
from kimi_serve.service.target import ServiceTarget
from kimi_serve.service.unit import UnitContext

Say = Callable[[str], None]
Prewarm = Callable[[], dict[str, Any]]  # restart --prewarm's first step: the page cache filled, its JSON


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Change:
    """What install-service and restart did: the steps and verdicts (``result``), the deployment they acted on and,
    in the report beside ``deployment``, what a rolling restart rolled and what a prewarm read."""

    result: Result
    fleet: Fleet
    rolled: list[dict[str, Any]] | None = None
    prewarm: dict[str, Any] | None = None

    def extra(self) -> dict[str, Any]:
        """The keys the report adds to the result's own: ``deployment``, and ``rolled`` / ``prewarm`` when there."""
        out: dict[str, Any] = {"deployment": self.fleet.to_json()}
        if self.rolled is not None:
            out["rolled"] = self.rolled
        if self.prewarm:
            out["prewarm"] = self.prewarm
        return out


def recover(target: ServiceTarget, notice: Say, *, installs: bool = False) -> None:
    """Settle a change of the target's unit, or of any member of its deployment, that was killed part-way
    (kimi_serve.service.journal), and say so. ``installs`` (install-service, restart): without $KIMI_SERVE_API_KEY,
    a key file the killed run created stays, so the command finishes with it; with the key, the rollback removes it
    and the command writes its own from the key it was given."""
    keep = installs and not (current().api_key or "").strip()
    for message in recover_fleet(target.systemd, target.unit, keep_secret=keep):
        notice(message)


def plan(
    target: ServiceTarget,
    environ: Mapping[str, str],
    *,
    now: bool,
    contract: bool,
    replace: bool = True,
    preview: bool = False,
    say: Say = _quiet,
) -> Fleet:
    """The target's deployment planned once (its profile checked: schema, rules, SGLang's parser, host)."""
    assert target.profile is not None
    say(f"checking profile {target.profile.ref} (schema, rules, SGLang's parser, host)...")
    return plan_fleet(
        target,
        now=now,
        ctx=UnitContext.detect(),
        environ=environ,
        contract=contract,
        replace=replace,
        preview=preview,
    )


def install_service(
    target: ServiceTarget,
    verifier: Verifier,
    environ: Mapping[str, str],
    *,
    now: bool,
    replace: bool,
    wait_lock: bool,
    say: Say = _quiet,
    notice: Say = _quiet,
) -> Change:
    """install-service: every unit the profile needs on this host written, enabled and (``now``) started and
    verified, under the root's lock, after the rollback of a killed change."""
    require_systemd(target.systemd)  # before any lock, recovery or write (exit 5, nothing changed)
    with root_lock("install-service", target.systemd.root, wait=wait_lock):
        recover(target, notice, installs=True)
        fleet = plan(target, environ, now=now, contract=False, replace=replace, say=say)
        return Change(install_fleet(fleet, target.systemd, verifier, environ), fleet)


def uninstall_service(target: ServiceTarget, *, dry_run: bool, wait_lock: bool, notice: Say = _quiet) -> Result:
    """uninstall-service: every member stopped, disabled and removed, the router first (``dry_run``: the actions)."""
    root, base, systemd = target.systemd.root, target.unit, target.systemd
    if dry_run:
        return uninstall_fleet(root, base, systemd, dry_run=True)
    with root_lock("uninstall-service", root, wait=wait_lock):
        recover(target, notice)
        return uninstall_fleet(root, base, systemd, dry_run=False)


def restart_service(
    target: ServiceTarget,
    verifier: Verifier,
    environ: Mapping[str, str],
    *,
    only: list[int],
    wait_lock: bool,
    prewarm: Prewarm | None = None,
    say: Say = _quiet,
    notice: Say = _quiet,
) -> Change:
    """restart: the one unit with its contract check and rollback, or the replicas rolled one at a time behind the
    router (:func:`~kimi_serve.service.rolling.restart_deployment`); ``prewarm`` first, while the old server serves."""
    if only and not target.replicated:  # a usage error: before the host checks and the slow plan
        raise no_replica_to_pick()
    require_systemd(target.systemd)  # before any lock, recovery or write (exit 5, nothing changed)
    with root_lock("restart", target.systemd.root, wait=wait_lock):
        recover(target, notice, installs=True)
        fleet = plan(target, environ, now=True, contract=True, say=say)
        warmed = prewarm() if prewarm is not None else None
        result, rolled = restart_deployment(fleet, target.systemd, verifier, environ, only=only, progress=say)
        return Change(result, fleet, rolled, warmed)


def service_status(target: ServiceTarget) -> tuple[Status | FleetStatus | ForegroundStatus, list[Run]]:
    """status: the unit or the deployment's members (one body: a single unit is a deployment of one member); nothing
    installed and a foreground `up` (of the profile, when one is given) running: that `up`, looked at now. With the
    `up` runs recorded (stale records pruned)."""
    runs = read_runs()
    prune(runs)
    runs = runs_of(runs, target.profile)  # with --profile, that profile's `up`s only
    unit = status_of(target)
    return foreground_of(unit, runs, target.profile) or unit, runs
