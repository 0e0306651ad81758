"""The ranks of the collective self-test (host/allreduce_selftest.py): one child per rank (no torchrun), each a
:class:`~kimi_serve.process.child.Server` with its own log, run together under one deadline. Ranks still running at
the deadline are stopped (SIGTERM, then SIGKILL to their group) and the run is marked ``hung``: nothing outlives it.
"""

from __future__ import annotations

import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STOP_GRACE_S = 2.0
TAIL_LINES = 20  # the other lines kept per rank (the last ones): a chatty rank's log stays in its file, not in memory


@dataclass
class RankRun:
    lines: list[str] = field(default_factory=list)  # the lines ``keep`` accepted (stdout and stderr), as they came
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))  # the last other lines
    status: int | None = None  # the exit status (negative: the signal that ended it)
    ran_out: bool = False  # still running at the deadline (then stopped)


@dataclass
class RanksRun:
    ranks: list[RankRun]
    hung: bool  # a rank was still running at the deadline
    wall_s: float


def run_ranks(
    world_size: int,
    rank_argv: Callable[[int, str], list[str]],
    env: dict[str, str],
    deadline_s: float,
    keep: Callable[[str], bool],
) -> RanksRun:
    """Start ``rank_argv(rank, init_method)`` for every rank (``init_method``: a ``file://`` rendezvous in a private
    temporary folder), keep the lines ``keep`` accepts (and the last few others), until all have ended or
    ``deadline_s`` has passed."""

    def take(run: RankRun, texts: list[str]) -> None:
        for text in texts:
            (run.lines.append if keep(text) else run.tail.append)(text)

    from kimi_serve.process.child import Server

    runs = [RankRun() for _ in range(world_size)]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kimi-serve-ranks-") as tmp:
        init = f"file://{tmp}/rendezvous"
        servers: list[Server] = []
        try:
            for r in range(world_size):
                servers.append(Server.start(rank_argv(r, init), env, Path(tmp) / f"rank{r}.log"))
            end = start + deadline_s
            while time.monotonic() < end and not all(s.output_closed and s.poll() is not None for s in servers):
                for server, run in zip(servers, runs, strict=True):
                    take(run, [line.text for line in server.lines(timeout=0.02)])
            for server, run in zip(servers, runs, strict=True):
                run.ran_out = server.poll() is None
        finally:
            for server, run in zip(servers, runs, strict=True):
                run.status = server.stop(STOP_GRACE_S)
                take(run, [line.text for line in server.lines(timeout=0)])
                server.close()
    return RanksRun(runs, any(r.ran_out for r in runs), time.monotonic() - start)
