"""The parts of a replicated `up` (docs/up.md, "Replicated profiles"): one launch and log file per replica and one
for the router, the ports they need, and the console a replica's watch writes to (its lines tagged with its name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.process.child import Server
from kimi_serve.process.startup_log import PHASE_TITLES, Event, Progress
from kimi_serve.profile.deployment import Deployment
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.member import Member, Role
from kimi_serve.up.console import Console
from kimi_serve.up.options import UpOptions
from kimi_serve.up.watch import REPLICA_PORT_HINT, UP_PORT_HINT, Outcome, Signals, Watch

ROUTER_POLL_S = 0.5
ROUTER_READY_S = 120.0  # from the router's start until it reports every worker healthy
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def part_log(base: Path, tag: str) -> Path:
    """``up-PROFILE-STAMP.log`` -> ``up-PROFILE-STAMP-TAG.log`` (so `kimi-serve logs` and the pruning see them)."""
    return base.with_name(f"{base.stem}-{tag}{base.suffix or '.log'}")


def member_logs(deployment: Deployment, base_log: Path) -> dict[Member, Path]:
    """The log file of each member of a routed ``deployment`` (the replicas, then the router), next to ``base_log``.
    `up` starts local replicas only."""
    remote = [m.endpoint for m in deployment.replicas if not m.local]
    if remote:
        raise KimiServeError(
            f"router.workers names other hosts ({', '.join(remote)}): `up` starts local replicas only",
            where=f"{deployment.profile.name}: router.workers",
            hint="leave router.workers empty for `up`, or run each host's replica with "
            "`up --set replicas=1` and the router under systemd (docs/scale-out.md)",
        )
    return {m: part_log(base_log, m.tag) for m in deployment.members}


def port_preflight(launches: Mapping[Member, Launch], console: Console) -> None:
    """Every port the deployment binds must be free before anything starts (the doctor checked replica 0's): the
    other replicas', the router's and its metrics port (the router panics on a taken port). Exit 5 otherwise."""
    from kimi_serve.host.doctor import port_problem

    (first, one), *others = launches.items()  # replica 0 (the doctor checked its port), ..., the router
    wanted = [(m.title, launch.host, launch.port) for m, launch in others]
    metrics = _metrics_bind(others[-1][1])
    if metrics is not None:
        wanted.append(("router metrics (router.metrics_host/metrics_port)", *metrics))
    seen: dict[tuple[str, int], str] = {(one.host, one.port): first.title}
    for name, host, port in wanted:
        clash = seen.get((host, port))
        problem = f"{name} and {clash} both use port {port}" if clash else port_problem(host, port)
        if problem:
            raise KimiServeError(
                problem,
                where="preflight: port",
                exit_code=ExitCode.ENVIRONMENT,
                hint="stop whatever listens there or change router.port / router.metrics_port / "
                "server.port (--set KEY=VALUE)",
            )
        seen[(host, port)] = name
    console.info(f"preflight: ports free for {len(launches) - 1} replicas, the router and its metrics")


def _metrics_bind(router: Launch) -> tuple[str, int] | None:
    args = list(router.server_args)
    try:
        return args[args.index("--prometheus-host") + 1], int(args[args.index("--prometheus-port") + 1])
    except (ValueError, IndexError):
        return None


class TaggedConsole(Console):
    """What one replica's :class:`kimi_serve.up.watch.Watch` writes to: every line goes to the deployment's console
    tagged with the replica; its start progress is kept (the deployment draws one status line for all parts)."""

    def __init__(self, parent: Console, tag: str) -> None:
        super().__init__(out=parent.out, err=parent.err, tty=parent.tty, echo_server=parent.echo_server)
        self.parent, self.tag = parent, tag
        self.progress: Progress | None = None

    def info(self, text: str) -> None:
        self.parent.info(f"{self.tag}: {text}")

    def problem(self, text: str) -> None:
        self.parent.problem(f"{self.tag}: {text}")

    def server_line(self, text: str) -> None:
        if not self._noise.drop(text):  # this replica's own stream: a warning's two lines are adjacent here
            self.parent.server_line(f"[{self.tag}] {ANSI.sub('', text)}")

    def tick(self, progress: Progress, elapsed: float, deadline: float) -> None:
        self.progress = progress

    def end_progress(self) -> None:
        """The deployment's status line ends when the whole deployment is ready (or stops), not one replica."""

    def _progress(self, ev: Event) -> None:
        """Shard and graph counts show in the deployment's status line."""

    def phase_text(self) -> str:
        p = self.progress
        if p is None:
            return "starting"
        text = PHASE_TITLES.get(p.phase, p.phase).split(" (")[0]
        if p.shards_total and p.phase == "weights":
            text += f" {100 * p.shards_done // p.shards_total}%"
        return text


class Running:
    """One server member: its process, its watch, and the signals its watch reads (a replica's: a relay the
    deployment sets when it must stop; the one server's: `up`'s own)."""

    def __init__(
        self, member: Member, launch: Launch, log: Path, server: Server, opts: UpOptions, console: Console, tagged: bool
    ) -> None:
        self.member, self.server = member, server
        self.console = TaggedConsole(console, member.tag) if tagged else console
        hint = REPLICA_PORT_HINT if member.role is Role.REPLICA else UP_PORT_HINT
        self.watch = Watch(server, launch, opts, self.console, log, hint)
        self.relay = Signals()  # never installed: the supervisor sets count/last, or puts `up`'s signals here
        self.outcome: Outcome | None = None

    def state(self) -> str:
        if self.outcome is not None:
            return "exited"
        if self.watch.ready_at is None:
            return self.console.phase_text() if isinstance(self.console, TaggedConsole) else "starting"
        return "serving" if self.watch.verify_done else "contract check"


class RouterPoller:
    """The router's health view (kimi_serve.router.client.router_health), one request at a time off the watch loop,
    at most every ``ROUTER_POLL_S``; read with the control plane's admin key (the key file's ``admin-api-key``:
    /workers refuses the clients' key). ``expected``: the replicas' URLs, the worker set the router must hold."""

    def __init__(self, pool: ThreadPoolExecutor, url: str, key_file: str | None, expected: list[str]) -> None:
        from kimi_serve.router.client import admin_key_of

        self.pool, self.url, self.api_key, self.expected = pool, url, admin_key_of(key_file), expected
        self.future: Future[Any] | None = None
        self.next = 0.0
        self.differs = ""  # the last membership line said ("" while the router holds exactly the replicas)

    def membership_note(self, view: Any) -> str:
        """A line to say when the router's worker set starts or stops differing from the replicas (someone with the
        control plane's key added or removed workers: the deployment is degraded), else ""."""
        if view is None or not view.listed:
            return ""
        line = view.membership_line(self.expected)
        if line == self.differs:
            return ""
        self.differs = line
        if not line:
            return "the router's workers are the profile's replicas again"
        return (
            f"DEGRADED: {line}: clients' requests (and their keys) may go to a server that is not part of this "
            "deployment (fix: kimi-serve restart puts missing replicas back; remove unknown workers and rotate the "
            "admin-api-key)"
        )

    def poll(self, now: float) -> Any:
        """A fresh view when one arrived since the last call, else None."""
        view = None
        if self.future is not None and self.future.done():
            view, self.future = self.future.result(), None
        if self.future is None and now >= self.next:
            from kimi_serve.router.client import router_health

            self.next = now + ROUTER_POLL_S
            self.future = self.pool.submit(router_health, self.url, self.api_key)
        return view


def router_taken(router: Server, launch: Launch) -> Outcome | None:
    """Exit 3 when the router's port answers from another process than the router `up` started (which will then fail
    to bind), checked before its "every worker healthy" is taken for the router's (:func:`port_taken`)."""
    from kimi_serve.core.net import client_url
    from kimi_serve.process.ready import port_taken

    taken = port_taken(router.pid, client_url(launch.host, launch.port))
    return Outcome(ExitCode.UNREACHABLE, f"{taken}, not the router up started", UP_PORT_HINT) if taken else None


def dry_run(deployment: Deployment, opts: UpOptions, base_log: Path, console: Console) -> int:
    """What `up --dry-run` prints: each member's launch (the one server's; or each replica's, then the router's),
    then what `up` would wait for."""
    check = f"run the {opts.verify_suite} contract check" if opts.verify else ""
    one = deployment.launch
    shown = [(one.engine, base_log, one)]
    if deployment.router is not None:
        logs = member_logs(deployment, base_log)
        shown = [(m.title, logs[m], launch) for m, launch in deployment.launches.items()]
    for name, log, launch in shown:
        console.info(f"dry run: would start {name} (log: {log}):")
        console.info("$ " + launch.shell())
    if deployment.router is None:
        console.info(
            f"then wait up to {opts.startup_timeout_s:g}s for /health, {check + ', ' if check else ''}and supervise"
        )
        return int(ExitCode.OK)
    console.info(
        f"each replica: wait up to {opts.startup_timeout_s:g}s for /health"
        + (f", {check}" if check else "")
        + f"; then the router: wait up to {ROUTER_READY_S:g}s until it reports every replica healthy"
        + (", run the contract check through it" if opts.verify else "")
        + ", and supervise"
    )
    return int(ExitCode.OK)


def part_glob(base: Path) -> str:
    return str(base.with_name(f"{base.stem}-*{base.suffix or '.log'}"))
