"""`kimi-serve up`: preflight, start, cold-start progress, early failure detection, contract check, supervision.

Exit codes (docs/up.md): 0 the server exited on its own with status 0; 1 contract check failed (server stopped);
3 never ready (startup.timeout, or distributed init hung); 4 the server exited or crashed, or a failure was seen in its
log (it is stopped); 5 preflight failed (nothing started); 130 stopped on request (SIGINT/SIGTERM) and the server
stopped cleanly. "Exit with the server's status": a requested stop whose server did not end cleanly (it needed SIGKILL
or exited with another status) is 4, not 130.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, WARN, error_from, failed
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.up.console import Console
from kimi_serve.up.startup_log import PHASES, StartupTracker
from kimi_serve.up.supervisor import Server, describe_status

# After SIGTERM, SGLang drains and exits 0; during load it has no handler and dies by SIGTERM: both are clean stops.
CLEAN_STOP = (0, -signal.SIGTERM)
HEALTH_TIMEOUT_S = 20.0  # SGLang's SGLANG_HEALTH_CHECK_TIMEOUT: /health generates a token and may take this long


@dataclass(frozen=True)
class UpOptions:
    verify: bool = True
    startup_timeout_s: float = 1800.0  # profile startup.timeout
    init_timeout_s: float = 180.0  # all ranks past "Init parallel ends." (SGLang's own limit: 10 min or none)
    stop_grace_s: float = 120.0  # SIGTERM -> SIGKILL of the group (profile service.stop_timeout)
    failure_grace_s: float = 10.0  # after a failure in the log, time for the server to exit on its own
    health_every_s: float = 1.0
    tp_size: int = 1
    verify_suite: str = "quick"
    verify_timeout_s: float = 120.0
    served_model: str | None = None

    @classmethod
    def from_profile(cls, p: Profile, *, verify: bool = True, **overrides: Any) -> UpOptions:
        values = dict(verify=verify, startup_timeout_s=float(p.startup.timeout),
                      stop_grace_s=float(p.service.stop_timeout),
                      tp_size=p.parallel.tp_size, verify_suite=p.verify.suite, verify_timeout_s=float(p.verify.timeout),
                      served_model=p.model.served_name)
        return cls(**{**values, **overrides})


class _Signals:
    """SIGINT/SIGTERM set a flag (counted: a second one escalates at once); restored on exit."""

    def __init__(self) -> None:
        self.count = 0
        self.last: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on)
        return self

    def _on(self, signum: int, _frame: Any) -> None:
        self.count += 1
        self.last = signum

    def __exit__(self, *_exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def default_log_file(profile_name: str) -> Path:
    from kimi_serve.core.settings import state_root

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return state_root() / "logs" / f"up-{profile_name}-{stamp}.log"


def server_env(launch: Launch) -> dict[str, str]:
    from kimi_serve.core.resources import package_root
    from kimi_serve.core.settings import with_pythonpath

    env = {**os.environ, **launch.env, "PYTHONUNBUFFERED": "1"}
    if launch.engine == "simulator":  # the SGLang interpreter imports kimi_serve from here
        env = with_pythonpath(env, package_root())
    return env


def health_target(launch: Launch) -> Any:
    from kimi_serve.verify import parse_target

    return parse_target(launch.endpoint)


# ---------------------------------------------------------------------------------------------- preflight


def preflight(profile: Profile, launch: Launch, console: Console, host: Any = None) -> None:
    """The doctor checks; a failing one stops `up` before anything starts (exit 5)."""
    from kimi_serve.check.doctor import run_doctor

    report = run_doctor(profile, launch, host)
    for c in report.checks:
        if c.status in (WARN, FAIL):
            console.info(f"preflight {c.status}: {c.code}: {c.line()}")
    bad = failed(report.checks)
    if bad:
        raise error_from(bad, more="see above", prefix=f"preflight: {bad[0].code}: ", exit_code=ExitCode.ENVIRONMENT)
    console.info(f"preflight: {len(report.checks)} checks passed ({sum(c.status == WARN for c in report.checks)} "
                 "warning(s))")


# ---------------------------------------------------------------------------------------------- the watch loop


@dataclass
class _Outcome:
    code: ExitCode
    message: str
    hint: str = ""


class _Watch:
    def __init__(self, server: Server, launch: Launch, opts: UpOptions, console: Console, log_path: Path) -> None:
        self.server, self.launch, self.opts, self.console, self.log_path = server, launch, opts, console, log_path
        self.tracker = StartupTracker(tp_size=opts.tp_size)
        self.started = time.monotonic()
        self.init_started: float | None = None
        self.failure_at: float | None = None
        self.ready_at: float | None = None
        self.next_health = self.started + opts.health_every_s
        self.health: Future[Any] | None = None
        self.verify: Future[Any] | None = None
        self.verify_done = False
        self.reason: _Outcome | None = None  # why we are stopping (None: not stopping)
        self.stop_deadline = 0.0
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="up-probe")

    # -- helpers
    def pump(self, timeout: float) -> None:
        for line in self.server.lines(timeout):
            self.console.server_line(line.text)
            for ev in self.tracker.feed(line.text):
                self.console.event(ev)
                if ev.phase == "init" and self.init_started is None:
                    self.init_started = time.monotonic()
                if ev.kind == "phase" and ev.phase in ("http", "ready"):
                    self.next_health = 0.0  # check /health now rather than at the next tick

    def begin_stop(self, outcome: _Outcome, announce: str) -> None:
        if self.reason is not None:
            return
        self.reason = outcome
        self.stop_deadline = time.monotonic() + self.opts.stop_grace_s
        self.console.info(f"{announce}; stopping the server (SIGTERM to pid {self.server.pid}, SIGKILL to its group "
                          f"after {self.opts.stop_grace_s:g}s)")
        self.server.terminate()

    # -- the loop
    def run(self, signals: _Signals) -> _Outcome:
        try:
            while True:
                self.pump(0.2)
                rc = self.server.poll()
                if rc is not None:
                    return self.finish(rc)
                self.step(signals, time.monotonic())
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def step(self, signals: _Signals, now: float) -> None:
        if signals.count and self.reason is None:
            name = signal.Signals(signals.last or signal.SIGINT).name
            self.begin_stop(_Outcome(ExitCode.INTERRUPTED, f"stopped on {name}"), f"{name} received")
        if self.reason is not None:
            if (now >= self.stop_deadline or signals.count >= 2) and not self.server.killed:
                self.console.info(f"escalating: SIGKILL to process group {self.server.pgid}")
                self.server.kill_group()
            return
        failure = self.tracker.failure
        if failure is not None and self.ready_at is not None and failure.kind == "traceback":
            # after ready, a bare traceback is a failed request (e.g. a 500), not a dying server: report, keep serving
            self.console.problem(f"the server logged an exception while serving (it keeps running): {failure.summary}")
            self.tracker.failure = None
            failure = None
        if failure is not None and self.failure_at is None:
            self.failure_at = now
            self.console.problem(f"FAILURE in the server log ({failure.kind}, {now - self.started:.1f}s after "
                                 f"start): {failure.report()}")
        if self.failure_at is not None:
            if now - self.failure_at >= self.opts.failure_grace_s:
                self.begin_stop(self._failure_outcome(), "the server did not exit after its failure")
            return
        if self.ready_at is None:
            self._watch_start(now)
        elif self.verify is not None and not self.verify_done and self.verify.done():
            self._verified(self.verify.result())

    def _watch_start(self, now: float) -> None:
        opts, p = self.opts, self.tracker.progress
        if now - self.started > opts.startup_timeout_s:
            self.begin_stop(_Outcome(ExitCode.UNREACHABLE, f"not ready after {opts.startup_timeout_s:g}s (phase: "
                                     f"{p.phase})", "raise startup.timeout or read the log"), "startup timeout")
            return
        if (self.init_started is not None and len(p.ranks_init_done) < opts.tp_size
                and now - self.init_started > opts.init_timeout_s):
            missing = sorted(set(range(opts.tp_size)) - p.ranks_init_done)
            self.begin_stop(_Outcome(
                ExitCode.UNREACHABLE, f"distributed init hung: no 'Init parallel ends.' from rank(s) "
                f"{', '.join(map(str, missing))} within {opts.init_timeout_s:g}s (NCCL/GPU problem; SGLang itself "
                "waits 10 min or forever)", "run kimi-serve doctor; rerun with NCCL_DEBUG=INFO in the profile's env"),
                "distributed init hung")
            return
        if self.health is not None and self.health.done():
            readiness, self.health = self.health.result(), None
            if readiness.ready:
                self._ready()
                return
        if self.health is None and now >= self.next_health:
            self.next_health = now + (self.opts.health_every_s if PHASES.index(p.phase) >= PHASES.index("http")
                                      else 3 * self.opts.health_every_s)
            self.health = self._pool.submit(self._poll_health)

    def _poll_health(self) -> Any:
        """One GET /health. On SGLang it runs a 1-token generation, so allow its own limit (20 s), off the loop."""
        from kimi_serve.verify import wait_ready

        return wait_ready(health_target(self.launch), time.monotonic(), poll_timeout=HEALTH_TIMEOUT_S)

    def _ready(self) -> None:
        self.ready_at = time.monotonic()
        self.console.info(f"[ready] server ready in {self.ready_at - self.started:.1f}s "
                          f"(GET /health 200 at {health_target(self.launch).base_url})")
        if self.opts.verify:
            self.console.info(f"contract check ({self.opts.verify_suite} suite)...")
            self.verify = self._pool.submit(self._run_verify)
        else:
            self.verify_done = True
            self._supervising()

    def _run_verify(self) -> Any:
        from kimi_serve.verify import resolve_api_key, run_verify

        key = resolve_api_key(key_file=self.launch.api_key_file)
        return run_verify(health_target(self.launch), api_key=key, model=self.opts.served_model, wait=30.0,
                          timeout=self.opts.verify_timeout_s, suite=self.opts.verify_suite)

    def _verified(self, report: Any) -> None:
        from kimi_serve.verify.render import render_lines

        self.verify_done = True
        for line in render_lines(report).splitlines():
            self.console.info(line)
        if report.exit_code != 0:
            code = ExitCode.UNREACHABLE if report.exit_code == ExitCode.UNREACHABLE else ExitCode.FAILED
            first = report.error or next((f for pr in report.probes for f in pr.findings), None)
            self.begin_stop(_Outcome(code, f"contract check failed: {first.message if first else report.status}",
                                     first.fix if first else "read the verify output above"),
                            "contract check failed")
            return
        self._supervising()

    def _supervising(self) -> None:
        self.console.info(f"supervising pid {self.server.pid} (log {self.log_path}); Ctrl-C stops the server")

    def _failure_outcome(self) -> _Outcome:
        f = self.tracker.failure
        assert f is not None
        return _Outcome(ExitCode.SERVER_EXITED, f"server failed ({f.kind}): {f.summary} (it did not exit; stopped)",
                        f.fix)

    def finish(self, rc: int) -> _Outcome:
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
                return _Outcome(ExitCode.SERVER_EXITED, f"the server did not stop cleanly ({status})",
                                "read the log")
            return self.reason
        failure = self.tracker.failure
        if failure is not None:
            if self.failure_at is None:
                self.console.problem(f"FAILURE in the server log ({failure.kind}): {failure.report()}")
            return _Outcome(ExitCode.SERVER_EXITED, f"server failed ({failure.kind}): {failure.summary} ({status})",
                            failure.fix)
        if self.ready_at is not None and rc == 0:
            return _Outcome(ExitCode.OK, "the server exited with status 0")
        when = ("after it was ready" if self.ready_at is not None
                else f"during start (phase {self.tracker.progress.phase})")
        tail = list(self.tracker.recent)[-15:]
        if tail:
            self.console.problem("last log lines:\n" + "\n".join(f"  | {t}" for t in tail))
        return _Outcome(ExitCode.SERVER_EXITED, f"the server exited {when}: {status}", "read the log")


def serve(launch: Launch, opts: UpOptions, log_path: Path, console: Console) -> int:
    """Start ``launch``, watch it to readiness and the contract check, supervise; return the exit code.

    Raises :class:`KimiServeError` for every non-zero outcome but an interrupt (which returns 130).
    """
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()
    except OSError as exc:
        raise KimiServeError(f"cannot write the log file {log_path}: {exc.strerror or exc}",
                             hint="pass --log-file PATH or set KIMI_SERVE_STATE_DIR",
                             exit_code=ExitCode.ENVIRONMENT) from None
    console.info(f"starting {launch.engine} (log: {log_path})")
    console.info("$ " + launch.shell().replace("\n", " "))
    try:
        server = Server.start(list(launch.argv), server_env(launch), log_path)
    except OSError as exc:
        raise KimiServeError(f"cannot start {launch.argv[0]}: {exc.strerror or exc}", hint="check the profile's python",
                             exit_code=ExitCode.ENVIRONMENT) from None
    console.info(f"server pid {server.pid} (own session and process group)")
    watch = _Watch(server, launch, opts, console, log_path)
    try:
        with _Signals() as signals:
            outcome = watch.run(signals)
    finally:
        if server.poll() is None:  # an error in `up` itself: never leave the server behind
            server.stop(opts.stop_grace_s)
        server.close()
    if outcome.code in (ExitCode.OK, ExitCode.INTERRUPTED):
        console.info(outcome.message)
        return int(outcome.code)
    raise KimiServeError(outcome.message, where=f"log {log_path}", hint=outcome.hint or None, exit_code=outcome.code)


def run_up(profile_ref: str, *, dry_run: bool = False, verify: bool = True, log_file: Path | None = None,
           console: Console | None = None, host: Any = None, **overrides: Any) -> int:
    """The `up` command: load and validate the profile, preflight, then :func:`serve` (or print, with dry_run)."""
    from kimi_serve.check.report import validated_launch
    from kimi_serve.profile.loader import load_profile

    console = console or Console()
    profile = load_profile(profile_ref)
    launch = validated_launch(profile)
    preflight(profile, launch, console, host)
    log_path = log_file or default_log_file(profile.name)
    opts = UpOptions.from_profile(profile, verify=verify, **overrides)
    if dry_run:
        console.info(f"dry run: would start {launch.engine} (log: {log_path}):")
        console.info("$ " + launch.shell().replace("\n", " "))
        console.info(f"then wait up to {opts.startup_timeout_s:g}s for /health, "
                     + (f"run the {opts.verify_suite} contract check, " if verify else "")
                     + "and supervise")
        return int(ExitCode.OK)
    return serve(launch, opts, log_path, console)
