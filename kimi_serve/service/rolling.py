"""restart's one body (:func:`restart_deployment`): the one unit (:mod:`kimi_serve.service.restart`), or a replicated
deployment's rolling restart, one replica at a time, never leaving the router without a healthy worker
(docs/scale-out.md, "As services").

For each replica: wait (up to :func:`~kimi_serve.service.timeouts.router_health_wait_sec`) for the router
(``GET /workers``) to report a healthy worker OTHER than it, else stop (before the first: exit 5, nothing changed).
Take it out of the router's rotation (``DELETE /workers/ID``): the router's health checks would take interval x
threshold to notice the stop, and a request sent to a stopping replica meanwhile fails (measured: HTTP 500
``call_upstream_request_error``, no retry). Restart it as one unit (its own journal, contract check and rollback to
ITS last good unit), then put it back (``POST /workers``) whatever the outcome (:mod:`kimi_serve.service.rotation`).
A failing replica stops the roll (the ones after it keep their units); a passing one must show up healthy in the
router again before the next is stopped. The router's unit is restarted last, only when what it runs changed (argv,
environment, settings, or its verify timer).

Exit codes: :mod:`kimi_serve.service.restart`'s, for the replica that stopped the roll (1, 4, 70); 1 also when the
router does not see a restarted replica healthy in time, or a replica may be out of its rotation (named, with the
command); 5 refused before the first change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.profile.member import Member, Role
from kimi_serve.service.fleet import Fleet
from kimi_serve.service.gates import wait_router
from kimi_serve.service.install import Plan, Result, Verifier
from kimi_serve.service.marker import parse_marker
from kimi_serve.service.member_units import installed_members
from kimi_serve.service.restart import restart
from kimi_serve.service.rotation import Rotation, put_back, take_out
from kimi_serve.service.state import read_text
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.timeouts import router_health_wait_sec

Progress = Callable[[str], None]
DRAIN_S = 2.0  # after the router stops sending to a replica: let its last requests finish before the stop


def router_key(fleet: Fleet) -> str | None:
    """The key the router's worker management (/workers) requires: the control plane's admin key, the profile key
    file's ``admin-api-key`` (read under the install root; never the clients' key, which the router refuses there),
    or None for an unkeyed router. A keyed file without one is an error naming the fix."""
    key_file = fleet.deployment.profile.server.api_key_file
    if not key_file:
        return None
    from kimi_serve.core.keyfile import ADMIN_KEY_HINT, read_admin_key

    where = fleet.deployment.profile.where("server.api_key_file")
    admin = read_admin_key(fleet.first.paths.under_root(key_file), where)
    if admin is None:
        raise KimiServeError(
            f"{key_file} has no admin-api-key: the router's worker management takes only that key",
            where=where,
            hint=f"add a line 'admin-api-key: OTHER-KEY' to {key_file} ({ADMIN_KEY_HINT}) and restart the router",
        )
    return admin


def _replicas(fleet: Fleet) -> dict[Member, Plan]:
    """The plan of each replica this host runs (the ones a rolling restart rolls), in index order."""
    return {m: fleet.plans[m] for m in fleet.deployment.replicas if m in fleet.plans}


def _refuse_topology_change(fleet: Fleet) -> None:
    """A rolling restart keeps every replica's address: the router in front keeps its worker list meanwhile."""
    installed = {u for m, u in installed_members(fleet.first.paths.root, fleet.base).items() if m.role is Role.REPLICA}
    planned = {plan.unit.name for plan in _replicas(fleet).values()}
    hint = (
        f"kimi-serve uninstall-service --unit-name {fleet.base.removesuffix('.service')}, then install-service "
        "--now with the new profile"
    )
    if not installed:
        raise KimiServeError(
            f"{fleet.base.removesuffix('.service')} is not installed as a replicated deployment",
            where="restart",
            hint="kimi-serve install-service --profile P --now first",
            exit_code=ExitCode.ENVIRONMENT,
        )
    if installed != planned:
        raise KimiServeError(
            f"the replicas change (installed: {', '.join(sorted(installed))}; profile: "
            f"{', '.join(sorted(planned))}): a rolling restart keeps the topology",
            where="replicas",
            hint=hint,
            exit_code=ExitCode.ENVIRONMENT,
        )
    for m, plan in _replicas(fleet).items():
        text = read_text(plan.paths.unit_file)
        marker = parse_marker(text) if text else None
        if marker and marker.endpoint != m.endpoint:
            raise KimiServeError(
                f"{m.label} moves from {marker.endpoint} to {m.endpoint}: a rolling "
                "restart keeps every replica's address (the router's worker list)",
                where="server.port",
                hint=hint,
                exit_code=ExitCode.ENVIRONMENT,
            )


def _put_back_missing(fleet: Fleet, r: Rotation, result: Result) -> None:
    """A replica missing from the router's rotation (a roll killed between taking it out and putting it back) is
    put back first."""
    ids = r.ids()
    if isinstance(ids, str):
        return  # the wait for a healthy worker says why
    for m in _replicas(fleet):
        if m.url not in ids:
            _restore(r, m, result, pending=False, note=" (it was missing)")


def _restore(r: Rotation, member: Member, result: Result, *, pending: bool, note: str = "") -> bool:
    """Put the replica ``member`` back (:func:`kimi_serve.service.rotation.put_back`, bounded); a replica that may be
    left out is named with the command that puts it back, and fails the roll (exit 1). Whether it is back."""
    url = member.url
    problem = put_back(r, url, pending=pending)
    if problem is None:
        result.add(f"put {url} back into the router's rotation{note}", "done")
        return True
    result.add(
        f"put {url} back into the router's rotation{note}",
        "failed",
        f"{member.label} ({url}) may be out of the router's rotation: {problem}; run the restart again (it puts "
        f"a missing replica back first), or put it back with: {r.command(url)}",
    )
    result.exit_code = ExitCode.FAILED
    return False


def _settings(text: str | None) -> list[str]:
    """A unit's lines that change what runs: not the comments (the marker, the --set line), not the Description (the
    profile's name)."""
    return [] if text is None else [line for line in text.splitlines() if not line.startswith(("#", "Description="))]


def _changed(plan: Plan) -> bool:
    """Whether the router must restart: its argv, environment or settings changed (a renamed profile alone does not
    take the front door down), or its verify timer did."""
    if _settings(read_text(plan.paths.unit_file)) != _settings(plan.unit.text):
        return True
    files = list(plan.monitor.files) if plan.monitor else []
    return any(read_text(plan.paths.unit_path(u.name)) != u.text for u in files)


def _merge(result: Result, part: Result) -> None:
    result.steps += part.steps
    result.new, result.rollback = part.new, part.rollback


def rolling_restart(
    fleet: Fleet,
    systemd: Systemd,
    verifier: Verifier,
    environ: Mapping[str, str],
    *,
    only: list[int] | None = None,
    progress: Progress | None = None,
) -> tuple[Result, list[dict[str, Any]]]:
    """Roll ``only`` (replica indexes, in that order; default all) and then the router if it changed; returns the
    combined report and one entry per replica restarted."""
    say = progress or (lambda _: None)
    _refuse_topology_change(fleet)
    by_index = {m.index: (m, plan) for m, plan in _replicas(fleet).items()}
    order = list(only) if only else sorted(by_index)
    unknown = [i for i in order if i not in by_index]
    if unknown:
        have = ", ".join(map(str, sorted(by_index)))
        raise KimiServeError(
            f"no replica {unknown[0]} on this host (replicas: {have})",
            where="--replica",
            hint="pick a replica index from kimi-serve status",
        )
    router, profile = fleet.deployment.router, fleet.deployment.profile
    assert router is not None
    router_plan = fleet.plans[router]
    endpoint, key, wait = router.endpoint, router_key(fleet), router_health_wait_sec(profile)
    rot = Rotation(endpoint, key, profile.server.api_key_file, wait)
    result, rolled = Result(fleet.base), list[dict[str, Any]]()
    _put_back_missing(fleet, rot, result)
    if result.exit_code != ExitCode.OK:
        return result, rolled  # a replica that cannot be put back: named; nothing is rolled
    for n, index in enumerate(order):
        member, plan = by_index[index]
        url = member.url
        say(f"{member.label}: waiting for the router to report another healthy worker...")
        ok, state = wait_router(endpoint, key, minimum=1, wait=wait, exclude=url)
        if not ok:
            message = (
                f"the router {endpoint} reports no healthy worker other than {member.label} after {wait:.0f}s "
                f"({state}): restarting it would leave clients with none"
            )
            hint = "bring another replica up first (kimi-serve status shows which), then run restart again"
            _stop_before(result, plan.paths.unit, member, first=n == 0, message=message, hint=hint)
            break
        result.add(f"router {endpoint} before {plan.paths.unit}", "done", state)
        t0 = time.monotonic()
        problem, pending = take_out(rot, url)
        if problem:
            result.add(f"take {url} out of the router's rotation", "failed", problem)
            # whatever the router did with the removal (applied late, answered oddly): the replica goes back first
            if not _restore(rot, member, result, pending=pending):
                return result, rolled
            message = f"cannot take {member.label} out of the router's rotation: {problem} (it is back in it)"
            hint = "check the router (kimi-serve status), then run restart again"
            _stop_before(result, plan.paths.unit, member, first=n == 0, message=message, hint=hint)
            break
        result.add(f"take {url} out of the router's rotation", "done", f"DELETE /workers; drain {DRAIN_S:g}s")
        try:
            time.sleep(DRAIN_S)
            say(f"{member.label}: restarting {plan.paths.unit} (contract-checked, rolled back on failure)...")
            part = restart(plan, systemd, verifier, environ)
        finally:  # whatever happened (a rollback, an error): the router gets the replica back once it answers
            back = _restore(rot, member, result, pending=False)
        _merge(result, part)
        rolled.append(
            {
                "replica": index,
                "unit": plan.paths.unit,
                "exit_code": int(part.exit_code),
                "ok": part.exit_code == ExitCode.OK,
                "seconds": round(time.monotonic() - t0, 1),
                "rolled_back": bool(part.rollback and part.rollback.ok),
            }
        )
        if part.exit_code != ExitCode.OK:
            result.exit_code = part.exit_code
            rest = order[n + 1 :]
            result.add(
                "stop the roll",
                "done",
                f"{member.label} did not pass"
                + (f"; replicas {', '.join(map(str, rest))} keep their units" if rest else ""),
            )
            return result, rolled
        if not back:  # named, with the command that puts it back (exit 1); the next replica keeps its place
            return result, rolled
        ok, state = wait_router(endpoint, key, minimum=0, wait=wait, healthy=url)
        result.add(f"router {endpoint} sees {member.label} healthy", "done" if ok else "failed", state)
        rolled[-1]["seconds"] = round(time.monotonic() - t0, 1)
        if not ok:
            result.exit_code = ExitCode.FAILED
            return result, rolled
    if result.exit_code != ExitCode.OK:
        return result, rolled
    if _changed(router_plan):
        say(f"restarting the router {router_plan.paths.unit} (its unit changed)...")
        part = restart(router_plan, systemd, verifier, environ)
        _merge(result, part)
        result.exit_code = part.exit_code
    else:
        result.add(f"restart {router_plan.paths.unit}", "skipped", "its unit is unchanged: the router keeps serving")
    return result, rolled


def _stop_before(result: Result, unit: str, member: Member, *, first: bool, message: str, hint: str) -> None:
    """The roll cannot take the replica ``member`` out: refused outright when it is the first (nothing changed yet),
    else the roll stops there, failed, with the replicas before it restarted."""
    if first:
        raise KimiServeError(message, where=member.label, exit_code=ExitCode.ENVIRONMENT, hint=hint)
    result.add(f"stop the roll before {unit}", "failed", message)
    result.exit_code = ExitCode.FAILED


def restart_deployment(
    fleet: Fleet,
    systemd: Systemd,
    verifier: Verifier,
    environ: Mapping[str, str],
    *,
    only: list[int] | None = None,
    progress: Progress | None = None,
) -> tuple[Result, list[dict[str, Any]] | None]:
    """restart of any deployment: its one unit (a single unit, this host's rank), or its replicas one at a time and
    then the router (:func:`rolling_restart`). Returns the report and, for a rolling restart, one entry per replica."""
    say = progress or (lambda _: None)
    if fleet.deployment.routed:
        say(f"rolling restart of {fleet.base.removesuffix('.service')} (one replica at a time)...")
        return rolling_restart(fleet, systemd, verifier, environ, only=only, progress=say)
    if only:
        raise no_replica_to_pick()
    plan = fleet.first
    say(f"restarting {plan.unit.name} (waits up to {plan.candidate.restart_timeout:.0f}s for the contract check)...")
    return restart(plan, systemd, verifier, environ), None


def no_replica_to_pick() -> KimiServeError:
    """``restart --replica`` of a profile that is one unit."""
    return KimiServeError(
        "the profile has one replica (replicas: 1)",
        where="--replica",
        hint="drop --replica: restart rolls back the one unit",
    )
