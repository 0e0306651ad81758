"""`kimi-serve status` of a foreground `kimi-serve up` (its run record, kimi_serve.core.runs): the server's /health,
or for a replicated profile the router's workers and each replica's /health, so a deployment that serves with a
replica down reads "serving through the router, degraded", never "NOT serving" (docs/up.md, "Run records"). Read
only: nothing is started, stopped or written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.net import endpoint_url
from kimi_serve.core.report import to_json
from kimi_serve.core.runs import Run
from kimi_serve.profile.deployment import run_members
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.member import Member, Role
from kimi_serve.router.client import RouterHealth, admin_key_of, router_health
from kimi_serve.service.fleet_status import FleetStatus
from kimi_serve.service.status import health_phase

READY = "ready"


@dataclass
class ForegroundStatus:
    run: Run
    health: str  # the server's /health phase (ready, refused, ...); for a replicated profile the router's /health
    router: RouterHealth | None = None
    replicas: dict[Member, str] = field(default_factory=dict)  # each replica's /health phase

    @property
    def expected(self) -> list[str]:
        return [endpoint_url(m.endpoint) for m in self.replicas]

    @property
    def serving(self) -> bool:
        """Clients are answered: the server's /health is 200, or the router's with at least one healthy replica."""
        if self.router is None:
            return self.health == READY
        return self.router.reachable and self.router.ready and self.router.healthy_of(self.expected) > 0

    @property
    def whole(self) -> bool:
        """Every part healthy: the one server, or the router with every replica healthy in it and answering."""
        if self.router is None:
            return self.serving
        ready = all(phase == READY for phase in self.replicas.values())
        return self.serving and ready and self.router.serves_all(self.expected)

    @property
    def exit_code(self) -> ExitCode:
        """0 when the whole deployment is up; 1 when it is down or degraded."""
        return ExitCode.OK if self.whole else ExitCode.FAILED

    def verdict(self) -> str:
        r = self.run.record
        what = f"foreground `up` of {r.get('profile')} (pid {r.get('pid')})"
        if self.router is None:
            return f"{what}: " + ("serving" if self.serving else f"NOT serving (/health {self.health})")
        if self.whole:
            return f"{what}: serving through the router"
        if self.serving:
            return f"{what}: serving through the router, degraded ({self.router.line(self.expected)})"
        return f"{what}: NOT serving through the router ({self.router.line(self.expected)})"

    def rows(self) -> list[tuple[str, str]]:
        r = self.run.record
        rows = [("deployment", self.verdict())]
        if self.router is None:
            rows.append(("health", f"{self.health} ({r.get('endpoint')}/health)"))
        else:
            rows.append(("router", f"{r.get('endpoint')}: {self.router.line(self.expected)}"))
            for m, phase in self.replicas.items():
                seen = self.router.worker(endpoint_url(m.endpoint))
                where = "" if seen is None else "; router: healthy" if seen.healthy else "; router: UNHEALTHY"
                rows.append((m.label, f"{m.endpoint} /health {phase}{where}"))
        return [*rows, ("log", str(r.get("log")))]

    def findings(self) -> list[Finding]:
        """Why it is not whole (down, or degraded: serving with a replica out), with the fix."""
        if self.whole:
            return []
        profile = self.run.record.get("profile")
        fix = f"kimi-serve logs --profile {profile}; stop `up` (Ctrl-C) and start it again"
        code = "foreground.degraded" if self.serving else "foreground.down"
        return [Finding("status", code, FAIL, self.verdict(), fix)]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "foreground": True,
            "run": self.run.to_json(),
            "health": self.health,
            "serving": self.serving,
            "degraded": self.serving and not self.whole,
            "exit_code": int(self.exit_code),
            "router": None if self.router is None else to_json(self.router),
            "replicas": [{"index": m.index, "endpoint": m.endpoint, "health": p} for m, p in self.replicas.items()],
        }


def foreground_status(
    run: Run, admin_key: str | None = None, health: Callable[[str], str] = health_phase
) -> ForegroundStatus:
    """One look at a running `up` (``run``: its record): ``admin_key`` opens the router's /workers (the profile key
    file's admin-api-key; None for a keyless profile)."""
    first, *replicas = run_members(run)
    if first.role is not Role.ROUTER:
        return ForegroundStatus(run, health(first.endpoint))
    router = router_health(endpoint_url(first.endpoint), admin_key)
    phases = {m: health(m.endpoint) for m in replicas}
    return ForegroundStatus(run, READY if router.ready else "not ready", router, phases)


def runs_of(runs: list[Run], profile: Profile | None) -> list[Run]:
    """The runs `status` shows: with a profile, only that profile's `up`s."""
    return [r for r in runs if profile is None or r.record.get("profile") == profile.name]


def foreground_of(st: FleetStatus, runs: list[Run], profile: Profile | None) -> ForegroundStatus | None:
    """What `status` reports instead of the unit: where nothing of the unit (or of the deployment) is installed and
    a foreground `up` (of the profile, when one is named) runs, the newest such run, looked at now; else None."""
    running = [r for r in runs_of(runs, profile) if r.running]
    if st.installed or not running:
        return None
    run = max(running, key=lambda r: str(r.record.get("started")))
    key_file = profile.server.api_key_file if profile else None
    return foreground_status(run, admin_key_of(key_file) if key_file else None)
