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
from kimi_serve.profile.loader import Profile
from kimi_serve.router.client import RouterHealth, admin_key_of, router_health
from kimi_serve.service.fleet_status import FleetStatus
from kimi_serve.service.status import Status, health_phase

READY = "ready"


@dataclass
class ForegroundStatus:
    run: Run
    health: str  # the server's /health phase (ready, refused, ...); for a replicated profile the router's /health
    router: RouterHealth | None = None
    replicas: list[tuple[int, str, str]] = field(default_factory=list)  # (index, endpoint, /health phase)

    @property
    def expected(self) -> list[str]:
        return [endpoint_url(endpoint) for _, endpoint, _ in self.replicas]

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
        ready = all(phase == READY for _, _, phase in self.replicas)
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
            for index, endpoint, phase in self.replicas:
                seen = self.router.worker(endpoint_url(endpoint))
                where = "" if seen is None else "; router: healthy" if seen.healthy else "; router: UNHEALTHY"
                rows.append((f"replica {index}", f"{endpoint} /health {phase}{where}"))
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
            "replicas": [{"index": i, "endpoint": e, "health": phase} for i, e, phase in self.replicas],
        }


def foreground_status(
    run: Run, admin_key: str | None = None, health: Callable[[str], str] = health_phase
) -> ForegroundStatus:
    """One look at a running `up` (``run``: its record): ``admin_key`` opens the router's /workers (the profile key
    file's admin-api-key; None for a keyless profile)."""
    router_part, parts = run.parts()
    if router_part is None:
        return ForegroundStatus(run, health(str(run.record.get("endpoint"))))
    router = router_health(endpoint_url(str(router_part.get("endpoint"))), admin_key)
    replicas = [
        (x["index"] if isinstance(x.get("index"), int) else i, str(x.get("endpoint")), health(str(x.get("endpoint"))))
        for i, x in enumerate(parts)
    ]
    return ForegroundStatus(run, READY if router.ready else "not ready", router, replicas)


def runs_of(runs: list[Run], profile: Profile | None) -> list[Run]:
    """The runs `status` shows: with a profile, only that profile's `up`s."""
    return [r for r in runs if profile is None or r.record.get("profile") == profile.name]


def foreground_of(st: Status | FleetStatus, runs: list[Run], profile: Profile | None) -> ForegroundStatus | None:
    """What `status` reports instead of the unit: where nothing of the unit (or of the deployment) is installed and
    a foreground `up` (of the profile, when one is named) runs, the newest such run, looked at now; else None."""
    installed = st.installed if isinstance(st, Status) else bool(st.router or st.replicas)
    running = [r for r in runs_of(runs, profile) if r.running]
    if installed or not running:
        return None
    run = max(running, key=lambda r: str(r.record.get("started")))
    key_file = profile.server.api_key_file if profile else None
    return foreground_status(run, admin_key_of(key_file) if key_file else None)
