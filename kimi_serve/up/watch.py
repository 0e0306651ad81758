"""The watch of one server of `up`: from the first log line to readiness, the contract check and supervision, driven
by the supervisor's loop (kimi_serve/up/supervisor.py); and the signal flag it reads (SIGINT/SIGTERM/SIGHUP, a second
one escalates)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode
from kimi_serve.process.child import Server, describe_status
from kimi_serve.process.ready import port_taken
from kimi_serve.process.startup import StartupJudge
from kimi_serve.process.startup_log import PHASES, is_health_access
from kimi_serve.profile.launch import Launch
from kimi_serve.up.console import Console
from kimi_serve.up.options import CLEAN_STOP, HEALTH_TIMEOUT_S, UpOptions
from kimi_serve.up.phases import PhaseClock

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # a requested stop: SIGHUP is a closed terminal
UP_PORT_HINT = "pick another port with --port or stop it"  # the one server's, and the router's (--port moves it)
REPLICA_PORT_HINT = "pick other replica ports with --set server.port=PORT or stop it"


class Signals:
    """SIGINT/SIGTERM/SIGHUP set a flag (counted: a second one escalates at once); restored on exit."""

    def __init__(self) -> None:
        self.count = 0
        self.last: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on)
        return self

    def _on(self, signum: int, _frame: Any) -> None:
        self.count += 1
        self.last = signum

    def __exit__(self, *_exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@dataclass
class Outcome:
    code: ExitCode
    message: str
    hint: str = ""


def contract_check(target: Any, opts: UpOptions, api_key: str | None, key_source: str) -> Any:
    """The contract check `up` runs once a server (or the router) is ready: the profile's suite and deadline."""
    from kimi_serve.verify import AFTER_START_WAIT, VerifyOptions, run_verify

    options = VerifyOptions(
        api_key=api_key,
        key_source=key_source,
        model=opts.served_model,
        wait=AFTER_START_WAIT,
        timeout=opts.verify_timeout_s,
        suite=opts.verify_suite,
        accept_floor=opts.accept_floor,
        spec_expected=opts.speculative,
        family=opts.family,
        preserve_thinking=opts.preserve_thinking,
    )
    return run_verify(target, options)


def contract_verdict(report: Any, say: Callable[[str], None], failed: str) -> Outcome | None:
    """Say ``report``'s lines; None when the contract holds, else the outcome that stops `up`: exit 3 when the server
    could not be reached, 1 otherwise, with the first finding (``failed``: the message's head)."""
    from kimi_serve.verify.render import render_lines

    for line in render_lines(report).splitlines():
        say(line)
    if report.exit_code == 0:
        return None
    code = ExitCode.UNREACHABLE if report.exit_code == ExitCode.UNREACHABLE else ExitCode.FAILED
    first = report.error or next((f for pr in report.probes for f in pr.findings), None)
    return Outcome(
        code,
        f"{failed}: {first.message if first else report.status}",
        first.fix if first else "read the verify output above",
    )


class Watch:
    def __init__(
        self,
        server: Server,
        launch: Launch,
        opts: UpOptions,
        console: Console,
        log_path: Path,
        port_hint: str = UP_PORT_HINT,
    ) -> None:
        self.server, self.launch, self.opts, self.console, self.log_path = server, launch, opts, console, log_path
        self.port_hint = port_hint  # the fix when another process answers on its port
        from kimi_serve.verify import parse_target

        self.target = parse_target(launch.endpoint)
        self.judge = StartupJudge(
            timeout_s=opts.startup_timeout_s,
            tp_size=opts.tp_size,
            init_timeout_s=opts.init_timeout_s,
            failure_grace_s=opts.failure_grace_s,
        )
        self.tracker = self.judge.tracker
        self.started = self.judge.started
        self.phases = PhaseClock(now=self.started)  # the supervisor gives the one server's the prediction
        self.ready_at: float | None = None
        self.next_health = self.started + opts.health_every_s
        self.health: Future[Any] | None = None
        self.verify: Future[Any] | None = None
        self.verify_done = False
        self.reason: Outcome | None = None  # why we are stopping (None: not stopping)
        self.stop_deadline = 0.0
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="up-probe")

    # -- helpers
    def pump(self, timeout: float) -> None:
        for line in self.server.lines(timeout):
            self.console.server_line(line.text)
            for ev in self.judge.feed(line.text):
                self.console.event(ev := self.phases.on_event(ev))
                if ev.kind == "phase" and ev.phase in ("http", "ready"):
                    self.next_health = 0.0  # check /health now rather than at the next tick

    def begin_stop(self, outcome: Outcome, announce: str) -> None:
        if self.reason is not None:
            return
        self.console.end_progress()
        self.reason = outcome
        self.stop_deadline = time.monotonic() + self.opts.stop_grace_s
        self.console.info(
            f"{announce}; stopping the server (SIGTERM to pid {self.server.pid}, SIGKILL to its group "
            f"after {self.opts.stop_grace_s:g}s)"
        )
        self.server.terminate()

    # -- one turn of the supervisor's loop (kimi_serve/up/supervisor.py): pump, then poll the server, then step
    def close(self) -> None:
        """No more probes (the loop has ended)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def step(self, signals: Signals, now: float) -> None:
        if signals.count and self.reason is None:
            name = signal.Signals(signals.last or signal.SIGINT).name
            self.begin_stop(Outcome(ExitCode.INTERRUPTED, f"stopped on {name}"), f"{name} received")
        if self.reason is not None:
            if (now >= self.stop_deadline or signals.count >= 2) and not self.server.killed:
                self.console.info(f"escalating: SIGKILL to process group {self.server.pgid}")
                self.server.kill_group()
            return
        failure = self.tracker.failure
        if failure is not None and self.ready_at is not None and failure.kind == "traceback":
            # after ready, a bare traceback is a failed request (e.g. a 500), not a dying server: report, keep serving
            self.console.problem(f"the server logged an exception while serving (it keeps running): {failure.summary}")
            self.judge.forget_failure()
        failure = self.judge.new_failure(now)
        if failure is not None:
            self.console.problem(
                f"FAILURE in the server log ({failure.kind}, {now - self.started:.1f}s after start): {failure.report()}"
            )
        if self.judge.failure_at is not None:
            verdict = self.judge.failure_verdict(now)
            if verdict is not None:
                self.begin_stop(Outcome(verdict.code, verdict.message, verdict.hint), verdict.announce)
            return
        if self.ready_at is None:
            self.console.tick(self.tracker.progress, now - self.started, self.opts.startup_timeout_s)
            self._watch_start(now)
        elif self.verify is not None and not self.verify_done and self.verify.done():
            self._verified(self.verify.result())

    def _watch_start(self, now: float) -> None:
        verdict = self.judge.start_verdict(now)
        if verdict is not None:
            self.begin_stop(Outcome(verdict.code, verdict.message, verdict.hint), verdict.announce)
            return
        p = self.tracker.progress
        if self.health is not None and self.health.done():
            (readiness, taken), self.health = self.health.result(), None
            if taken is not None:  # the 200 came from another process: this server will fail to bind
                self.begin_stop(
                    Outcome(ExitCode.UNREACHABLE, f"{taken}, not the server up started", self.port_hint), taken
                )
                return
            if readiness.ready:
                self._ready()
                return
        if self.health is None and now >= self.next_health:
            self.next_health = now + (
                self.opts.health_every_s
                if PHASES.index(p.phase) >= PHASES.index("http")
                else 3 * self.opts.health_every_s
            )
            self.health = self._pool.submit(self._poll_health)

    def _poll_health(self) -> tuple[Any, str | None]:
        """One GET /health. On SGLang it runs a 1-token generation, so allow its own limit (20 s), off the loop. A 200
        counts only from this server: (the readiness, why not when another process holds the port)."""
        from kimi_serve.verify import wait_ready

        readiness = wait_ready(self.target, time.monotonic(), poll_timeout=HEALTH_TIMEOUT_S)
        return readiness, port_taken(self.server.pid, self.target.base_url) if readiness.ready else None

    def _ready(self) -> None:
        self.console.end_progress()
        self.ready_at = time.monotonic()
        self.phases.mark_ready(self.ready_at)
        self.console.info(
            f"[ready] server ready in {self.ready_at - self.started:.1f}s (GET /health 200 at {self.target.base_url})"
        )
        if self.opts.verify:
            self.console.info(f"contract check ({self.opts.verify_suite} suite)...")
            self.verify = self._pool.submit(self._run_verify)
        else:
            self.verify_done = True
            self._supervising()

    def _run_verify(self) -> Any:
        from kimi_serve.verify import resolve_key

        key = resolve_key(key_file=self.launch.api_key_file, file_label="profile key file")
        return contract_check(self.target, self.opts, key.value, key.source)

    def _verified(self, report: Any) -> None:
        self.verify_done = True
        self.phases.mark_contract(report.exit_code == 0)
        failed = contract_verdict(report, self.console.info, "contract check failed")
        if failed is not None:
            self.begin_stop(failed, "contract check failed")
            return
        self._supervising()

    def _supervising(self) -> None:
        self.phases.settled("serving")
        self.console.info(f"supervising pid {self.server.pid} (log {self.log_path}); Ctrl-C stops the server")

    def finish(self, rc: int) -> Outcome:
        self.console.end_progress()
        self.pump(0.2)
        self.server.reap(0)  # leftover group members (they hold the output pipes) are killed here
        end = time.monotonic() + 5.0
        while not self.server.output_closed and time.monotonic() < end:
            self.pump(0.2)
        for ev in self.tracker.flush():
            self.console.event(ev)
        status = describe_status(rc)
        self.console.info(f"server pid {self.server.pid} ended: {status}")
        if self.reason is not None:
            if self.reason.code == ExitCode.INTERRUPTED and (rc not in CLEAN_STOP or self.server.killed):
                return Outcome(ExitCode.SERVER_EXITED, f"the server did not stop cleanly ({status})", "read the log")
            return self.reason
        failure = self.tracker.failure
        if failure is not None:
            if self.judge.failure_at is None:
                self.console.problem(f"FAILURE in the server log ({failure.kind}): {failure.report()}")
            return Outcome(
                ExitCode.SERVER_EXITED, f"server failed ({failure.kind}): {failure.summary} ({status})", failure.fix
            )
        if self.ready_at is not None and rc == 0:
            return Outcome(ExitCode.OK, "the server exited with status 0")
        when = (
            "after it was ready" if self.ready_at is not None else f"during start (phase {self.tracker.progress.phase})"
        )
        said = [t for t in self.tracker.recent if not is_health_access(t)]  # what it said, not the polls it answered
        tail = said[-15:]
        if tail:
            polls = " (its GET /health access lines left out)" if len(said) < len(self.tracker.recent) else ""
            self.console.problem(f"last log lines{polls}:\n" + "\n".join(f"  | {t}" for t in tail))
        return Outcome(ExitCode.SERVER_EXITED, f"the server exited {when}: {status}", "read the log")
