"""`kimi-serve status`'s one body (:func:`status_of`): the status of a deployment, one unit being a deployment of one
member (reported as that unit: docs/json.md). A replicated deployment: the router (its unit, /health, and how many
workers it reports healthy), each replica (its unit, /health, last contract verdict), and the contract checks of the
verify timer that targets the router. Each member's own view is :func:`kimi_serve.service.status.status`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.profile.deployment import members_of
from kimi_serve.profile.member import Member, Role, parse_role
from kimi_serve.router.client import Worker, router_workers
from kimi_serve.service.journal import describe, journal_units, read_intent
from kimi_serve.service.member_units import installed_members
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.status import Status, status
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.target import ServiceTarget


@dataclass
class FleetStatus:
    """The status of the deployment ``base``: each installed member's own :class:`Status`. ``routed`` False: the one
    unit (or this host's rank), whose report is that unit's."""

    base: str
    members: dict[Member, Status] = field(default_factory=dict)  # in start order: the replicas, then the router
    routed: bool = True
    workers: list[Worker] | str | None = None  # the router's view; a string says why it could not be read
    expected: tuple[str, ...] = ()  # the member units the profile names (status --profile), installed or not
    systemd_error: str | None = None  # why systemd cannot be asked (no member to say it: nothing installed)
    pending: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # journals of members not installed

    @property
    def router(self) -> Status | None:
        return next((st for m, st in self.members.items() if m.role is Role.ROUTER), None)

    @property
    def replicas(self) -> dict[Member, Status]:
        return {m: st for m, st in self.members.items() if m.role is Role.REPLICA}

    @property
    def installed(self) -> bool:
        """A unit of the deployment is installed here."""
        return any(st.installed for st in self.members.values())

    @property
    def interrupted(self) -> list[tuple[str, dict[str, Any]]]:
        """(unit, journal) of every member a killed change left a journal for, installed or not (yet)."""
        return [(st.unit, st.interrupted) for st in self.members.values() if st.interrupted] + self.pending

    @property
    def missing(self) -> list[str]:
        """Member units the profile names that are not installed here (all of them before install-service)."""
        there = {st.unit for st in self.members.values()}
        return [u for u in self.expected if u not in there]

    @property
    def healthy(self) -> tuple[int, int] | None:
        if not isinstance(self.workers, list):
            return None
        return sum(w.healthy for w in self.workers), len(self.workers)

    @property
    def unexpected(self) -> list[str]:
        """Workers the router lists that are no replica of this deployment (added behind kimi-serve's back: clients'
        requests, keys included, may go there)."""
        if not isinstance(self.workers, list):
            return []
        ours = {m.url for m in self.replicas}
        return [w.url for w in self.workers if w.url not in ours]

    @property
    def serving(self) -> bool:
        """The router is up and reports at least one healthy worker."""
        counts = self.healthy
        return bool(self.router and self.router.exit_code == ExitCode.OK and counts and counts[0] > 0)

    @property
    def exit_code(self) -> ExitCode:
        """0 only when the whole deployment is up: the router serving with every worker healthy, every replica active
        and answering; 1 otherwise (degraded included). The one unit's own."""
        if not self.routed:
            return self.one.exit_code
        counts = self.healthy
        whole = (
            self.serving
            and counts is not None
            and counts[0] == counts[1]
            and not self.unexpected
            and not self.pending
            and all(st.exit_code == ExitCode.OK and self.in_router(m) == "healthy" for m, st in self.replicas.items())
        )
        return ExitCode.OK if whole else ExitCode.FAILED

    def findings(self) -> list[Finding]:
        """Why the deployment is not OK, one line each with the fix: units the profile names that are missing, each
        member's own findings (they name their unit), the router not serving, workers that are no replica of ours."""
        if not self.routed:
            return self.one.findings()
        out: list[Finding] = []

        def fail(code: str, message: str, fix: str) -> None:
            out.append(Finding("status", code, FAIL, message, fix))

        if self.missing:
            fail(
                "unit.not_installed",
                f"{len(self.missing)} unit(s) of {self.base.removesuffix('.service')} not installed: "
                + ", ".join(self.missing),
                "kimi-serve install-service --profile P; a foreground `up` is listed under runs",
            )
        members = list(self.members.values())
        for unit, intent in self.pending:  # an installed member's own findings name its journal
            fail(
                "interrupted",
                f"{unit}: {describe(intent)}",
                "run kimi-serve install-service -p P (it settles the change first) or uninstall-service",
            )
        if self.systemd_error and not members:
            fail(
                "systemd.unreachable",
                f"systemd is not reachable here (systemctl: {self.systemd_error})",
                "run status on the host whose systemd runs the units; pass --root DIR to read an offline tree",
            )
        unique: dict[str, Finding] = {}  # the first of each line
        for f in (f for member in members for f in member.findings()):
            unique.setdefault(f.line(), f)
        out += unique.values()
        if self.router and not self.serving and not any(f.code.startswith("systemd.") for f in out):
            fail(
                "deployment.not_serving",
                f"the router {self.router.unit} does not serve ({self._view()})",
                "kimi-serve restart --profile P (rolls each replica back to its last good unit if it fails)",
            )
        if self.unexpected:
            fail(
                "router.unexpected_workers",
                f"the router lists workers that are no replica of this deployment: {', '.join(self.unexpected)}",
                "remove them from the router and rotate the admin-api-key",
            )
        return out

    def to_json(self) -> dict[str, Any]:
        if not self.routed:
            return self.one.to_json()
        counts = self.healthy
        router = self.router.to_json() if self.router else None
        if router is not None:
            router["workers"] = (
                [{"url": w.url, "healthy": w.healthy} for w in self.workers] if isinstance(self.workers, list) else None
            )
            router["workers_error"] = self.workers if isinstance(self.workers, str) else None
            router["healthy_workers"], router["total_workers"] = counts if counts else (None, None)
            router["unexpected_workers"] = self.unexpected
        return {
            "version": 1,
            "deployment": self.base.removesuffix(".service"),
            "serving": self.serving,
            "exit_code": int(self.exit_code),
            "router": router,
            "missing_units": self.missing,
            "interrupted": [
                {
                    "unit": unit,
                    **{k: i.get(k) for k in ("op", "pid", "started_at")},
                    "finished": bool(i.get("finished")),
                }
                for unit, i in self.interrupted
            ],
            "replicas": [
                {"index": m.index, **st.to_json(), "in_router": self.in_router(m)} for m, st in self.replicas.items()
            ],
        }

    @property
    def one(self) -> Status:
        """The one unit's status (a deployment of one member)."""
        return next(iter(self.members.values()))

    def in_router(self, replica: Member) -> str | None:
        """How the router sees this replica: healthy | unhealthy | missing (not in its rotation); None: unknown."""
        if not isinstance(self.workers, list):
            return None
        seen = {w.url: w.healthy for w in self.workers}
        return "missing" if replica.url not in seen else "healthy" if seen[replica.url] else "unhealthy"

    def _view(self) -> str:
        counts = self.healthy
        return f"{counts[0]}/{counts[1]} workers healthy" if counts else str(self.workers or "workers not checked")

    def rows(self) -> list[tuple[str, str]]:
        if not self.routed:
            return self.one.rows()
        rows = [
            (
                "deployment",
                f"{self.base.removesuffix('.service')}: "
                + ("serving" if self.serving else "NOT serving through the router")
                + ("" if self.exit_code == ExitCode.OK else " (degraded: see below)"),
            )
        ]
        if self.missing:
            rows.append(("not installed", ", ".join(self.missing)))
        if self.systemd_error and not self.members:
            rows.append(("systemd", f"not reachable here ({self.systemd_error})"))
        if self.router:
            view = self._view()
            if self.unexpected:
                view += (
                    f"; UNEXPECTED workers (no replica of this deployment): {', '.join(self.unexpected)} "
                    "(degraded: remove them and rotate the admin-api-key)"
                )
            rows.append(("router", f"{_line(self.router)}; {view}"))
        for m, st in self.replicas.items():
            seen = self.in_router(m)
            note = {
                "missing": "; NOT in the router's rotation (kimi-serve restart puts it back)",
                "healthy": "; router: healthy",
                "unhealthy": "; router: UNHEALTHY",
            }.get(seen or "", "")
            rows.append((m.label, _line(st) + note))
            rows.append(("  verdict", _verdict(st.last_verify)))
        if self.router and self.router.monitor:
            mon = self.router.monitor
            rows.append(
                (
                    "contract",
                    f"BROKEN since {mon['broken_since']} ({mon['broken_for_s']:.0f}s)"
                    if mon["broken_since"]
                    else f"holds through the router (last check {mon['contract_held_last']})",
                )
            )
        elif self.router:
            rows.append(("router check", _verdict(self.router.last_verify)))
        rows += [("INTERRUPTED", f"{unit}: {describe(intent)}") for unit, intent in self.interrupted]
        return rows


def _line(st: Status) -> str:
    s = st.state
    state = f"{s.get('ActiveState')} ({s.get('SubState')})" if s else st.state_error
    endpoint = st.marker.endpoint if st.marker else "?"
    edited = ", EDITED since install" if st.marker and not st.marker.body_matches else ""
    return f"{st.unit} {state}, {endpoint} /health {st.health or 'not checked'}{edited}"


def _verdict(record: dict[str, Any] | None) -> str:
    if record is None:
        return "no contract check recorded"
    return (
        f"{record.get('status')} at {record.get('time')} (profile {record.get('profile')}): "
        f"{str(record.get('detail'))[:140]}"
    )


def fleet_status(root: Path, base: str, systemd: Systemd, expected: tuple[str, ...] = ()) -> FleetStatus:
    """``expected``: the member units the profile names (:func:`kimi_serve.profile.deployment.members_of`), so a
    deployment not (or only partly) installed says which units are missing rather than looking for one unit."""
    installed = installed_members(root, base)
    st = FleetStatus(base, {m: status(ServicePaths(root, unit), systemd) for m, unit in installed.items()})
    st.expected = expected
    if expected and not installed:
        st.systemd_error = systemd.unreachable()
    there = set(installed.values())
    for unit in reversed(journal_units(root, base)):  # in install order
        intent = read_intent(ServicePaths(root, unit))
        if unit not in there and intent is not None:
            st.pending.append((unit, intent))
    if st.router and st.router.marker and systemd.live:
        st.workers = router_workers(st.router.marker.endpoint, _key(root, st.router))
    return st


def _key(root: Path, router: Status) -> str | None:
    record = router.last_good or {}
    key_file = record.get("api_key_file")
    if not key_file:
        return None
    from kimi_serve.router.client import admin_key_of

    # /workers takes the router control plane's admin key (the key file's admin-api-key), not the clients' key
    return admin_key_of(ServicePaths(root, router.unit).under_root(str(key_file)))


def status_of(target: ServiceTarget) -> FleetStatus:
    """`status`'s one body: a deployment's members (installed as one, the profile is replicated, or a killed change
    left a member's journal), else the one unit, a deployment of one member (its role from its marker)."""
    root, base = target.systemd.root, target.unit
    if target.installed_as_deployment or target.replicated or any(u != base for u in journal_units(root, base)):
        profile = target.profile if target.replicated else None
        expected = tuple(m.unit_name(base) for m in members_of(profile) if m.local) if profile else ()
        return fleet_status(root, base, target.systemd, expected)
    one = status(target.paths, target.systemd)
    parsed = parse_role(one.marker.role) if one.marker else None
    role, index = parsed or (Role.SINGLE, 0)
    return FleetStatus(base, {Member(role, index, one.marker.endpoint if one.marker else "", True): one}, routed=False)
