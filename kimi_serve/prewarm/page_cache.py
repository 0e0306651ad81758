"""`kimi-serve prewarm`: read a profile's checkpoint into the page cache so the next start loads from memory.

What it does, and what it never does (docs/coldstart.md):
- It reads only the pages that are not cached yet (``mincore`` first), sequentially, in 16 MiB blocks, with a few
  threads (one shard each). The bytes read are bounded by the uncached part of the checkpoint measured at the start.
- It refuses before reading anything when those bytes do not fit: uncached bytes > MemAvailable minus a margin of
  10 % of MemTotal. While it reads it re-checks MemAvailable every block and stops when it falls below that margin,
  so it does not push the host into reclaiming other memory (a running server's own memory and the rest of the page
  cache stay as they were, as far as the kernel lets a reader decide).
- It never drops, locks or evicts anything: no ``drop_caches``, no ``DONTNEED``, no ``mlock``. The pages it brings in
  stay ordinary reclaimable page cache.
- Ctrl-C (or ``stop``) ends it after the current block of each thread; what was read stays cached.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.report import json_meta, rounded
from kimi_serve.host import coldstart as cs
from kimi_serve.host.floor import RAM_MARGIN, prewarm_room
from kimi_serve.profile.loader import Profile

BLOCK = 16 * cs.MIB
THREADS = 4
Progress = Callable[[int, int], None]  # (bytes read so far, bytes to read)


@dataclass
class PrewarmResult:
    JSON_HEAD: ClassVar[dict[str, Any]] = {"version": 1, "kind": "kimi-serve-prewarm"}
    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (("bytes_per_s", lambda r: round(r.bytes_per_s)),)

    checkpoint_bytes: int
    shards: int
    cached_before: int
    to_read: int
    room: int
    bytes_read: int = 0
    seconds: float = field(default=0.0, metadata=json_meta(encode=rounded(3)))
    cached_after: int | None = None
    status: str = "done"  # done | nothing_to_do | refused | ram_short | interrupted
    reason: str = field(default="", metadata=json_meta(encode=lambda r: r or None))
    errors: list[str] = field(default_factory=list)

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0


class _Reader:
    def __init__(
        self,
        work: list[tuple[Path, list[tuple[int, int]]]],
        limit: int,
        mem_floor: int,
        mem: Callable[[], int],
        stop: threading.Event,
    ) -> None:
        self.work, self.limit, self.mem_floor, self.mem, self.stop = list(reversed(work)), limit, mem_floor, mem, stop
        self.lock = threading.Lock()
        self.read = 0
        self.ram_short = False
        self.errors: list[str] = []

    def _take(self, want: int) -> int:
        """Reserve up to ``want`` bytes of the budget; 0 when it is spent."""
        with self.lock:
            n = min(want, self.limit - self.read)
            self.read += max(n, 0)
            return max(n, 0)

    def run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                if not self.work:
                    return
                f, spans = self.work.pop()
            try:
                self._file(f, spans)
            except OSError as exc:
                with self.lock:
                    self.errors.append(f"{f}: {exc.strerror or exc}")

    def _file(self, f: Path, spans: list[tuple[int, int]]) -> None:
        fd = os.open(f, os.O_RDONLY)
        buf = memoryview(bytearray(BLOCK))
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            for start, end in spans:
                off = start
                while off < end:
                    if self.stop.is_set():
                        return
                    if self.mem() < self.mem_floor:
                        self.ram_short = True
                        self.stop.set()
                        return
                    n = self._take(min(BLOCK, end - off))
                    if n == 0:
                        return
                    got = os.preadv(fd, [buf[:n]], off)
                    if got < n:
                        with self.lock:
                            self.read -= n - got
                        return
                    off += n
        finally:
            os.close(fd)


def prewarm(
    fig: cs.Figures,
    *,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    mem: Callable[[], int] | None = None,
    threads: int = THREADS,
    tick_s: float = 0.5,
) -> PrewarmResult:
    """Bring the uncached part of ``fig.checkpoint`` into the page cache (see the module doc for the bounds)."""
    ck = fig.checkpoint
    need, room = prewarm_room(fig)
    res = PrewarmResult(ck.total, ck.shards, fig.cached, need, room)
    if not ck.files:
        res.status, res.reason = "nothing_to_do", "the profile's checkpoint has no shards"
        return res
    if need == 0:
        res.status, res.reason, res.cached_after = "nothing_to_do", "the whole checkpoint is already cached", fig.cached
        return res
    if need > room:
        res.status = "refused"
        res.reason = (
            f"the uncached {cs.gb(need)} do not fit: {cs.gb(fig.mem_available)} available minus a margin "
            f"of {RAM_MARGIN:.0%} of {cs.gb(fig.mem_total)} leaves {cs.gb(room)}"
        )
        return res
    mem = mem or (lambda: cs.meminfo().get("MemAvailable", 0))
    stop = stop or threading.Event()
    work = [(f, cs._uncached_spans(f)) for f in ck.files]  # each shard's uncached byte ranges, merged
    reader = _Reader([w for w in work if w[1]], need, int(RAM_MARGIN * fig.mem_total), mem, stop)
    pool = [threading.Thread(target=reader.run, daemon=True, name=f"prewarm-{i}") for i in range(max(1, threads))]
    started = time.monotonic()
    for t in pool:
        t.start()
    interrupted = False
    try:
        while any(t.is_alive() for t in pool):
            for t in pool:
                t.join(tick_s / len(pool))
            if progress:
                progress(reader.read, need)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        for t in pool:
            t.join()
    res.seconds = time.monotonic() - started
    res.bytes_read = reader.read
    res.errors = reader.errors
    if progress:
        progress(reader.read, need)
    res.cached_after = cs.residency(ck)
    if reader.ram_short:
        res.status, res.reason = (
            "ram_short",
            (f"stopped: MemAvailable fell below the margin ({cs.gb(RAM_MARGIN * fig.mem_total)}) while reading"),
        )
    elif interrupted or (stop.is_set() and reader.read < need):
        res.status, res.reason = "interrupted", "stopped on request; what was read stays cached"
    elif reader.errors:
        res.status, res.reason = "done", f"{len(reader.errors)} shard(s) could not be read"
    return res


def _refused(message: str, hint: str, exit_code: ExitCode = ExitCode.ENVIRONMENT) -> KimiServeError:
    return KimiServeError(message, where="prewarm", hint=hint, exit_code=exit_code)


def run_prewarm(p: Profile, *, state_root: Path, progress: Progress | None = None) -> PrewarmResult:
    """The `prewarm` command's core: the profile's checkpoint (model and draft) into the page cache."""
    from kimi_serve.host.floor import figures, loads_weights

    if not loads_weights(p):
        problem = f"profile {p.name} reads no checkpoint (engine: simulator or --load-format dummy)"
        raise _refused(problem, "prewarm a profile that loads real weights", ExitCode.USAGE)
    try:
        fig = figures(p, state_root, probe="never")
    except OSError as exc:
        problem = f"cannot read the checkpoint under {p.model.path}: {exc.strerror or exc}"
        raise _refused(problem, "run it as a user that can read the model files") from None
    bad = fig.checkpoint.problems
    if bad:  # refused before reading anything: a missing shard fails the load anyway, a FIFO would hang the reader
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise _refused(
            f"shard {bad[0][0]} is {bad[0][1]}{more}; nothing was read",
            "restore the checkpoint's shards as regular files (re-download or fix the link), then run prewarm "
            "again; kimi-serve doctor --profile NAME shows the checkpoint",
        )
    if not fig.checkpoint.files:
        raise _refused(
            f"no safetensors shards under {p.model.path}", "kimi-serve doctor --profile NAME shows what is missing"
        )
    return prewarm(fig, progress=progress)


def exit_code_of(res: PrewarmResult) -> ExitCode:
    return {
        "done": ExitCode.FAILED if res.errors else ExitCode.OK,
        "nothing_to_do": ExitCode.OK,
        "refused": ExitCode.ENVIRONMENT,
        "ram_short": ExitCode.ENVIRONMENT,
        "interrupted": ExitCode.INTERRUPTED,
    }[res.status]
