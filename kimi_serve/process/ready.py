"""Start a server and wait until it is ready (``GET /health`` 200): the one "start and wait" of `bench`, the contract
dry run and the simulator launcher; `up`'s watch (:mod:`kimi_serve.up.watch`) judges the start the same way
(:class:`~kimi_serve.process.startup.StartupJudge`).

A server that exits first is exit 4 (the failure and the last lines its log shows); one whose log shows a failure but
keeps running is stopped by the caller after the failure grace (exit 4); a hung distributed init, the deadline, or a
200 from another process on the port (:func:`port_taken`: taken between the preflight and the bind) is exit 3.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.process.child import Server, describe_status
from kimi_serve.process.startup import FAILURE_GRACE_S, INIT_TIMEOUT_S, TIMEOUT_HINT, StartupJudge
from kimi_serve.verify.listeners import foreign_listener
from kimi_serve.verify.readiness import wait_ready
from kimi_serve.verify.target import Target

SLICE_S = 1.0  # readiness is polled in slices this long, so a child that dies while loading is noticed at once
TAIL_LINES = 5
PORT_HINT = "stop that process or pick another port"


def port_taken(pid: int, base_url: str) -> str | None:
    """``port P is served by another process (pid N, COMMAND)`` when the listening socket a client of ``base_url``
    reaches is not held by the server of ``pid`` (its process tree, ``verify/listeners.py`` ``foreign_listener``);
    None when it is, or when that cannot be seen (``pid`` gone, no /proc). Asked once ``/health`` answered 200, before
    that answer is taken for the server's."""
    url = urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    holder = foreign_listener(port, pid, url.hostname or "")
    if holder is None:
        return None
    who = f"pid {holder.pid}, {holder.command or '?'}" if holder.pid is not None else "whose pid cannot be read"
    return f"port {port} is served by another process ({who})"


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
    timeout_hint: str = TIMEOUT_HINT,
    tp_size: int = 1,
    failure_grace_s: float = FAILURE_GRACE_S,
    init_timeout_s: float = INIT_TIMEOUT_S,
) -> float:
    """Seconds from now until ``server`` answers ``GET /health`` with 200; :class:`KimiServeError` otherwise.

    The server's lines are read as they arrive and judged (:class:`StartupJudge`); once it is ready its output goes
    to the log file only, so a long run queues nothing. A 200 from another process on the port is exit 3
    (:func:`port_taken`, with :data:`PORT_HINT` as the fix); the caller stops ``server``.
    """
    judge = StartupJudge(
        timeout_s=timeout,
        what=what,
        tp_size=tp_size,
        failure_grace_s=failure_grace_s,
        init_timeout_s=init_timeout_s,
        timeout_hint=timeout_hint,
    )
    end = judge.started + timeout
    where = f"log {server.log_path}"
    try:
        while True:
            for line in server.lines(0):
                judge.feed(line.text)
            judge.new_failure(time.monotonic())
            code = server.poll()
            if code is not None:
                for line in server.lines(0.2):
                    judge.feed(line.text)
                failure = judge.tracker.failure
                detail = f" ({failure.kind}: {failure.summary})" if failure else ""
                tail = " | ".join(server.log_tail(TAIL_LINES))
                raise KimiServeError(
                    f"{what} exited ({describe_status(code)}) before it was ready{detail}"
                    + (f"; last log lines: {tail}" if tail else ""),
                    where=where,
                    hint=failure.fix if failure else "read the log",
                    exit_code=ExitCode.SERVER_EXITED,
                )
            now = time.monotonic()
            verdict = judge.failure_verdict(now) if judge.failure_at is not None else judge.start_verdict(now)
            if verdict is not None:
                raise KimiServeError(verdict.message, where=where, hint=verdict.hint, exit_code=verdict.code)
            if judge.failure_at is not None:  # a failure in the log: it exits (above), or is stopped after the grace
                time.sleep(0.2)
                continue
            if wait_ready(target, min(end, now + SLICE_S), interval=0.25, poll_timeout=2.0, api_key=api_key).ready:
                taken = port_taken(server.pid, target.base_url)
                if taken is not None:
                    raise KimiServeError(
                        f"{taken}, not {what}", where=where, hint=PORT_HINT, exit_code=ExitCode.UNREACHABLE
                    )
                return time.monotonic() - judge.started
    finally:
        server.keep_lines = False
        server.lines(0)
