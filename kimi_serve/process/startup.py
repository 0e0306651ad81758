"""When a starting server is given up on: the one judgement of `up`'s watch and
:func:`kimi_serve.process.ready.wait_until_ready`. A :class:`StartupJudge` is fed the server's log lines
(:mod:`kimi_serve.process.startup_log`) and asked, as time passes, for a :class:`Verdict`:

- a failure in the log and no exit within :data:`FAILURE_GRACE_S` (exit 4; the caller stops it);
- the start deadline (``startup.timeout``) passed before ``/health`` answered 200 (exit 3);
- not every rank logged ``Init parallel ends.`` within :data:`INIT_TIMEOUT_S` of the first init line (exit 3;
  SGLang itself waits 10 minutes, or forever).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kimi_serve.core.errors import ExitCode
from kimi_serve.process.startup_log import Event, Failure, StartupTracker

FAILURE_GRACE_S = 10.0  # a failure in the log, the process still running: how long it gets to exit on its own
INIT_TIMEOUT_S = 180.0  # every rank past "Init parallel ends." after the first init line (SGLang: 10 min or none)
TIMEOUT_HINT = "raise startup.timeout or read the log"


@dataclass(frozen=True)
class Verdict:
    """Why the start is over without the server being ready."""

    code: ExitCode
    message: str
    hint: str
    announce: str  # the short reason `up` prints before it stops the server


class StartupJudge:
    """One server's start, judged from its log lines and the clock (see the module's docstring)."""

    def __init__(
        self,
        *,
        timeout_s: float,
        what: str = "the server",
        tp_size: int = 1,
        init_timeout_s: float = INIT_TIMEOUT_S,
        failure_grace_s: float = FAILURE_GRACE_S,
        timeout_hint: str = TIMEOUT_HINT,
    ) -> None:
        self.tracker = StartupTracker(tp_size=tp_size)
        self.timeout_s, self.what, self.tp_size = timeout_s, what, tp_size
        self.init_timeout_s, self.failure_grace_s, self.timeout_hint = init_timeout_s, failure_grace_s, timeout_hint
        self.started = time.monotonic()
        self.init_started: float | None = None
        self.failure_at: float | None = None

    def feed(self, text: str) -> list[Event]:
        """One log line; the startup events it completes."""
        events = self.tracker.feed(text)
        if self.init_started is None and any(ev.phase == "init" for ev in events):
            self.init_started = time.monotonic()
        return events

    def new_failure(self, now: float) -> Failure | None:
        """The failure the log shows, once, when it is first seen (its grace starts then)."""
        failure = self.tracker.failure
        if failure is None or self.failure_at is not None:
            return None
        self.failure_at = now
        return failure

    def forget_failure(self) -> None:
        """The failure was not the server's end (after ready, a bare traceback is a failed request): judge on."""
        self.tracker.failure, self.failure_at = None, None

    def failure_verdict(self, now: float) -> Verdict | None:
        """The failure seen did not end the server within its grace; None while it may still exit."""
        failure = self.tracker.failure
        if failure is None or self.failure_at is None or now - self.failure_at < self.failure_grace_s:
            return None
        return Verdict(
            ExitCode.SERVER_EXITED,
            f"{self.what} failed ({failure.kind}: {failure.summary}) and did not exit; stopped",
            failure.fix,
            f"{self.what} did not exit after its failure",
        )

    def start_verdict(self, now: float) -> Verdict | None:
        """Before ready: the deadline passed, or distributed init hung; None while the start may still succeed."""
        p = self.tracker.progress
        if now - self.started > self.timeout_s:
            return Verdict(
                ExitCode.UNREACHABLE,
                f"{self.what} was not ready within {self.timeout_s:g}s (phase: {p.phase})",
                self.timeout_hint,
                "startup timeout",
            )
        if (
            self.init_started is not None
            and len(p.ranks_init_done) < self.tp_size
            and now - self.init_started > self.init_timeout_s
        ):
            missing = ", ".join(map(str, sorted(set(range(self.tp_size)) - p.ranks_init_done)))
            return Verdict(
                ExitCode.UNREACHABLE,
                f"distributed init hung: no 'Init parallel ends.' from rank(s) {missing} within "
                f"{self.init_timeout_s:g}s (NCCL/GPU problem; SGLang itself waits 10 min or forever)",
                "run kimi-serve doctor; rerun with NCCL_DEBUG=INFO in the profile's env",
                "distributed init hung",
            )
        return None
