"""`up`'s one loop: the members of a deployment (kimi_serve.profile.deployment), started and supervised together
(docs/up.md "Replicated profiles"). One server is a deployment of one member: its :class:`kimi_serve.up.watch.Watch`
writes to `up`'s console and reads `up`'s signals itself. With a router, every replica starts at once (lines tagged,
signals relayed), the router once all have passed; a stop takes the router down first, then the replicas. A replica
that dies once the deployment is ready leaves it degraded (the router serves through the others); when none is left,
`up` stops and exits 4, and a requested stop of a degraded deployment exits 4, not 130.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.net import client_url
from kimi_serve.process.child import Server, describe_status
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.member import Member, Role
from kimi_serve.up.console import PREFIX, Console
from kimi_serve.up.options import CLEAN_STOP, UpOptions
from kimi_serve.up.phases import PhaseClock
from kimi_serve.up.replicas import (
    ANSI,
    ROUTER_READY_S,
    RouterPoller,
    Running,
    router_taken,
)
from kimi_serve.up.watch import Outcome, Signals, contract_check, contract_verdict


class Supervisor:
    """The members of one `up` (``launches``, each logging to its file in ``logs``): the one server, or the replicas
    and the router."""

    def __init__(
        self,
        launches: Mapping[Member, Launch],
        logs: Mapping[Member, Path],
        opts: UpOptions,
        console: Console,
        api_key: str | None = None,
        key_source: str = "",
        clock: PhaseClock | None = None,
    ) -> None:
        self.launches, self.logs, self.opts, self.console = launches, logs, opts, console
        self.router_member = next((m for m in launches if m.role is Role.ROUTER), None)
        self.api_key, self.key_source, self.clock = api_key, key_source, clock
        self.members: list[Running] = []
        self.router: Server | None = None
        self.router_rc: int | None = None
        self.state = "replicas"  # replicas -> router -> contract -> serving
        self.reason: Outcome | None = None  # set: stopping
        self.started = time.monotonic()
        self.router_started = 0.0
        self.router_deadline = 0.0
        self.router_stop_deadline = 0.0
        self.poller: Any = None  # kimi_serve.up.replicas.RouterPoller, once the router runs
        self.unrouted: dict[str, tuple[str, float]] = {}  # dead replicas the router still counts healthy
        self.verify: Future[Any] | None = None
        self.degraded: list[str] = []
        self.last_view: Any = None  # the router's last health view (kimi_serve.router.client.RouterHealth)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="up-router")

    @property
    def solo(self) -> bool:
        """One server: its watch speaks for `up` (no tags, no relay, its own outcome)."""
        return self.router_member is None

    @property
    def routing(self) -> Member:
        """The router (only asked for on a routed deployment)."""
        assert self.router_member is not None
        return self.router_member

    # -- start
    def start_members(self) -> None:
        for m, launch in ((m, x) for m, x in self.launches.items() if m != self.router_member):
            try:
                server = self._start(m, f"starting {launch.engine if self.solo else m.title}")
            except OSError as exc:
                raise KimiServeError(
                    f"cannot start {launch.argv[0]}: {exc.strerror or exc}",
                    hint="check the profile's python",
                    exit_code=ExitCode.ENVIRONMENT,
                ) from None
            running = Running(m, launch, self.logs[m], server, self.opts, self.console, tagged=not self.solo)
            if self.clock is not None:  # the prediction and the record (docs/coldstart.md)
                self.clock.started = self.clock.at["launch"] = running.watch.started
                running.watch.phases = self.clock
            self.members.append(running)
            self.console.info(
                f"{'' if self.solo else f'{m.tag}: '}server pid {server.pid} (own session and process group)"
            )

    def _start(self, m: Member, what: str) -> Server:
        """Say ``what`` starts and its command, then start member ``m`` (or the router) as a child of `up`'s main
        thread: SIGTERM if `up` dies, and `up`'s locks shared until it exits (docs/up.md, "However `up` ends")."""
        from kimi_serve.check.launch import server_env
        from kimi_serve.core.lock import held_lock_fds

        launch = self.launches[m]
        self.console.info(f"{what} (log: {self.logs[m]})")
        self.console.info("$ " + launch.shell())
        return Server.start(list(launch.argv), server_env(launch), self.logs[m], keep_fds=held_lock_fds())

    def _start_router(self) -> None:
        router, launch = self.routing, self.launches[self.routing]
        self.console.end_progress()
        try:
            self.router = self._start(router, f"every replica passed; starting the {router.title}")
        except OSError as exc:
            self.begin_stop(
                Outcome(
                    ExitCode.ENVIRONMENT,
                    f"cannot start the router: {exc.strerror or exc}",
                    "check the profile's python (sglang-router is in the engine locks)",
                ),
                "the router did not start",
            )
            return
        self.console.info(f"router: pid {self.router.pid} (own session and process group)")
        self.state = "router"
        self.poller = RouterPoller(
            self._pool, self._router_url(), launch.api_key_file, [m.url for m in self.launches if m != router]
        )
        self.router_started = time.monotonic()
        self.router_deadline = self.router_started + ROUTER_READY_S

    # -- the loop
    def run(self, signals: Signals) -> Outcome:
        if self.solo:  # the one server's watch reads `up`'s signals itself
            for m in self.members:
                m.relay = signals
        try:
            while True:
                self._pump_members()
                self._pump_router()
                self._step(signals, time.monotonic())
                if all(m.outcome is not None for m in self.members) and (
                    self.router is None or self.router_rc is not None
                ):
                    return self._final(signals)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            for m in self.members:
                m.watch.close()

    def _pump_members(self) -> None:
        live = [m for m in self.members if m.outcome is None]
        for m in live:
            m.watch.pump(0.2 / len(live))
            rc = m.server.poll()
            if rc is not None:
                m.outcome = m.watch.finish(rc)
                self._member_ended(m)
            else:
                m.watch.step(m.relay, time.monotonic())
        if not live:
            time.sleep(0.1)

    def _pump_router(self) -> None:
        if self.router is None or self.router_rc is not None:
            return
        for line in self.router.lines(0.0):
            self.console.server_line(f"[router] {ANSI.sub('', line.text)}")
        if (rc := self.router.poll()) is None:
            return
        self.router.reap(0)
        self.router_rc = rc
        self.console.info(f"router: pid {self.router.pid} ended: {describe_status(rc)}")
        if self.reason is None:
            self.begin_stop(
                Outcome(
                    ExitCode.SERVER_EXITED,
                    f"the router exited: {describe_status(rc)}",
                    f"read the router log {self.logs[self.routing]}",
                ),
                "the router exited",
            )

    def _member_ended(self, m: Running) -> None:
        o = m.outcome
        assert o is not None
        if self.reason is not None or self.solo:
            return
        if self.state != "serving":
            code = ExitCode.SERVER_EXITED if o.code in (ExitCode.OK, ExitCode.INTERRUPTED) else o.code
            self.begin_stop(Outcome(code, f"{m.member.title}: {o.message}", o.hint), f"{m.member.title} ended")
            return
        self.degraded.append(m.member.title)
        if m.member.role is Role.REPLICA:
            self.unrouted[m.member.url] = (m.member.title, time.monotonic())
        live = [x.member.title for x in self.members if x.outcome is None]
        if not live:
            self.begin_stop(
                Outcome(
                    ExitCode.SERVER_EXITED,
                    f"every replica exited (last: {m.member.title}: {o.message})",
                    "read the replica logs",
                ),
                "no replica left",
            )
            return
        self.console.problem(
            f"{m.member.title} exited ({o.message}); the router keeps serving through "
            f"{', '.join(live)} (degraded: `up` keeps running and exits 4 when stopped)"
        )

    def _step(self, signals: Signals, now: float) -> None:
        if self.solo:
            return
        if signals.count and self.reason is None:
            name = signal.Signals(signals.last or signal.SIGINT).name
            self.begin_stop(Outcome(ExitCode.INTERRUPTED, f"stopped on {name}"), f"{name} received")
        if self.reason is not None:
            self._stopping(signals, now)
            return
        for m in self.members:  # a replica that stops on its own (failure, timeout, contract) stops the start
            if self.state != "serving" and m.watch.reason is not None and m.outcome is None:
                self.begin_stop(
                    Outcome(m.watch.reason.code, f"{m.member.title}: {m.watch.reason.message}", m.watch.reason.hint),
                    f"{m.member.title} is stopping",
                )
                return
        if self.state == "replicas":
            self._status(now)
            if self.members and all(m.watch.verify_done for m in self.members):
                self._start_router()
        elif self.state == "router":
            self._status(now)
            self._watch_router(now)
        elif self.state == "contract" and self.verify is not None and self.verify.done():
            self._verified(self.verify.result())
        elif self.state == "serving":
            self._watch_unrouted(now)

    def _status(self, now: float) -> None:
        def text() -> str:
            parts = [f"{m.member.tag} {m.state()}" for m in self.members]
            router = {"replicas": "waiting for the replicas", "router": "starting"}.get(self.state, self.state)
            parts.append(f"router {router}")
            return PREFIX + " | ".join(parts) + f" | {now - self.started:.0f}s elapsed"

        self.console.show(text)

    def _watch_router(self, now: float) -> None:
        view = self.poller.poll(now)
        expected = self.poller.expected
        if view is not None and view.serves_all(expected):
            if self.router is not None and (taken := router_taken(self.router, self.launches[self.routing])):
                self.begin_stop(taken, taken.message.split(",", 1)[0])
                return
            self.console.end_progress()
            self.console.info(f"[ready] router ready in {now - self.router_started:.1f}s: {view.line(expected)}")
            self._router_ready()
            return
        self.last_view = view or self.last_view
        if now > self.router_deadline:
            last = self.last_view
            self.begin_stop(
                Outcome(
                    ExitCode.UNREACHABLE,
                    f"the router does not report every replica healthy "
                    f"after {ROUTER_READY_S:g}s ({last.line(expected) if last else 'no answer'})",
                    f"read the router log {self.logs[self.routing]}",
                ),
                "router not ready",
            )

    def _watch_unrouted(self, now: float) -> None:
        """Say when the router stops sending to a replica that died (its health checks take a few seconds), and when
        its worker set stops (or starts again) being the replicas (workers added or removed behind up's back)."""
        view = self.poller.poll(now)
        if note := self.poller.membership_note(view):
            self.console.info(f"router: {note}")
        for url, (name, since) in list(self.unrouted.items()):
            worker = view.worker(url) if view is not None else None
            if worker is not None and not worker.healthy:
                del self.unrouted[url]
                self.console.info(
                    f"router: {name} marked unhealthy {now - since:.1f}s after it exited "
                    f"({view.line(self.poller.expected) if view else ''}); requests go to the others"
                )

    def _router_url(self) -> str:
        launch = self.launches[self.routing]
        return client_url(launch.host, launch.port)

    def _router_ready(self) -> None:
        if not self.opts.verify:
            self._serving()
            return
        self.state = "contract"
        self.console.info(f"router: contract check through the router ({self.opts.verify_suite} suite)...")
        self.verify = self._pool.submit(self._run_verify)

    def _run_verify(self) -> Any:
        return contract_check(self._router_url(), self.opts, self.api_key, self.key_source)

    def _verified(self, report: Any) -> None:
        failed = contract_verdict(
            report,
            lambda line: self.console.info(f"router: {line}"),
            f"contract check through the {self.routing.title} failed",
        )
        if failed is not None:
            self.begin_stop(failed, "contract check through the router failed")
            return
        self._serving()

    def _serving(self) -> None:
        self.state = "serving"
        assert self.router is not None
        pids = ", ".join(f"{m.member.tag} pid {m.server.pid}" for m in self.members)
        self.console.info(
            f"supervising {len(self.members)} replicas ({pids}) and the router (pid {self.router.pid}); "
            f"clients use {self._router_url()}; Ctrl-C stops the router, then the replicas"
        )

    # -- stopping
    def begin_stop(self, outcome: Outcome, announce: str) -> None:
        if self.reason is not None:
            return
        self.console.end_progress()
        self.reason = outcome
        if self.router is not None and self.router_rc is None:
            self.router_stop_deadline = time.monotonic() + self.opts.stop_grace_s
            self.console.info(
                f"{announce}; stopping the router first (SIGTERM to pid {self.router.pid}), then the replicas"
            )
            self.router.terminate()
        else:
            self.console.info(f"{announce}; stopping the replicas")

    def _stopping(self, signals: Signals, now: float) -> None:
        assert self.reason is not None
        if self.router is not None and self.router_rc is None:
            if (now >= self.router_stop_deadline or signals.count >= 2) and not self.router.killed:
                self.console.info(f"escalating: SIGKILL to the router's process group {self.router.pgid}")
                self.router.kill_group()
            return
        for m in self.members:
            if m.outcome is not None:
                continue
            if self.reason.code == ExitCode.INTERRUPTED:  # each replica's watch stops it as `up` stops one server
                m.relay.count, m.relay.last = max(1, signals.count), signals.last
            else:
                m.watch.begin_stop(
                    Outcome(self.reason.code, self.reason.message, self.reason.hint),
                    f"the deployment is stopping ({self.reason.message})",
                )

    def _final(self, signals: Signals) -> Outcome:
        if self.solo:
            outcome = self.members[0].outcome
            assert outcome is not None
            return outcome
        reason = self.reason or Outcome(ExitCode.SERVER_EXITED, "every process of the deployment exited")
        if reason.code != ExitCode.INTERRUPTED:
            return reason
        unclean = [
            m.member.title
            for m in self.members
            if m.member.title not in self.degraded and (m.outcome is None or m.outcome.code != ExitCode.INTERRUPTED)
        ]
        if self.router is not None and (self.router_rc not in CLEAN_STOP or self.router.killed):
            unclean.append(f"{self.routing.title} ({describe_status(self.router_rc or 0)})")
        said = [f"{', '.join(self.degraded)} had exited during the run"] if self.degraded else []
        said += [f"did not stop cleanly: {', '.join(unclean)}"] if unclean else []
        if said:
            return Outcome(ExitCode.SERVER_EXITED, f"{reason.message}, but {'; '.join(said)}", "read the logs")
        return reason

    def cleanup(self) -> None:
        """After the loop, or an error in `up` itself: nothing of the deployment outlives `up`."""
        if self.router is not None:
            if self.router.poll() is None:
                self.router.stop(self.opts.stop_grace_s)
            self.router.close()
        for m in self.members:
            if m.server.poll() is None:
                m.server.stop(self.opts.stop_grace_s)
            m.server.close()
