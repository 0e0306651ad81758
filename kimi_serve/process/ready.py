"""Start a server and wait until it is ready: the one "start and wait" of `bench`, the contract dry run and the
simulator launcher. `up`'s watch (:mod:`kimi_serve.up.watch`) runs the same :class:`~kimi_serve.process.child.Server`,
the same startup-log reader and the same readiness poll, with its live phases, signals and supervision on top.

Ready means ``GET /health`` answered 200 (verify's readiness poll, :mod:`kimi_serve.verify.readiness`). Before that,
a server that exits is exit 4 (with the failure its log shows, and the log's last lines), one whose log shows a
failure but keeps running is stopped by the caller after :data:`FAILURE_GRACE_S` (exit 4), and one still not ready at
the deadline is exit 3.
"""

from __future__ import annotations

import time
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.process.child import Server, describe_status
from kimi_serve.process.startup_log import StartupTracker
from kimi_serve.verify.readiness import wait_ready
from kimi_serve.verify.target import Target

FAILURE_GRACE_S = 10.0  # a failure in the log, the process still running: how long it gets to exit on its own
SLICE_S = 1.0  # readiness is polled in slices this long, so a child that dies while loading is noticed at once
TAIL_LINES = 5


def start(argv: list[str], env: dict[str, str], log_path: Path, *, where: str | None = None) -> Server:
    """``argv`` as a child in its own session, its output to ``log_path`` (exit 5 when it cannot be started)."""
    try:
        return Server.start(argv, env, log_path)
    except OSError as exc:
        raise KimiServeError(
            f"cannot start {argv[0]}: {exc.strerror or exc}",
            where=where,
            hint="check the profile's python",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None


def wait_until_ready(
    server: Server,
    target: Target,
    *,
    timeout: float,
    what: str,
    api_key: str | None = None,
    timeout_hint: str = "raise startup.timeout or read the log",
    tp_size: int = 1,
    failure_grace_s: float = FAILURE_GRACE_S,
) -> float:
    """Seconds from now until ``server`` answers ``GET /health`` with 200; :class:`KimiServeError` otherwise.

    The server's lines are read as they arrive (:class:`StartupTracker`, the failure patterns of SGLang's log); once
    it is ready its output goes to the log file only, so a long run queues nothing.
    """
    tracker = StartupTracker(tp_size=tp_size)
    started = time.monotonic()
    end = started + timeout
    failed_at: float | None = None
    where = f"log {server.log_path}"
    try:
        while True:
            for line in server.lines(0):
                tracker.feed(line.text)
            failure = tracker.failure
            if failure is not None and failed_at is None:
                failed_at = time.monotonic()
            code = server.poll()
            if code is not None:
                for line in server.lines(0.2):
                    tracker.feed(line.text)
                failure = tracker.failure
                detail = f" ({failure.kind}: {failure.summary})" if failure else ""
                tail = " | ".join(server.log_tail(TAIL_LINES))
                raise KimiServeError(
                    f"{what} exited ({describe_status(code)}) before it was ready{detail}"
                    + (f"; last log lines: {tail}" if tail else ""),
                    where=where,
                    hint=failure.fix if failure else "read the log",
                    exit_code=ExitCode.SERVER_EXITED,
                )
            if failure is not None and failed_at is not None and time.monotonic() - failed_at >= failure_grace_s:
                raise KimiServeError(
                    f"{what} failed while starting ({failure.kind}: {failure.summary}) and did not exit",
                    where=where,
                    hint=failure.fix,
                    exit_code=ExitCode.SERVER_EXITED,
                )
            now = time.monotonic()
            if wait_ready(target, min(end, now + SLICE_S), interval=0.25, poll_timeout=2.0, api_key=api_key).ready:
                return time.monotonic() - started
            if time.monotonic() >= end:
                raise KimiServeError(
                    f"{what} was not ready within {timeout:g}s (phase: {tracker.progress.phase})",
                    where=where,
                    hint=timeout_hint,
                    exit_code=ExitCode.UNREACHABLE,
                )
    finally:
        server.keep_lines = False
        server.lines(0)
