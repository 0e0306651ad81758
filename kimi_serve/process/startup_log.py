"""Read SGLang 0.5.23's start-up log as it streams: phases, weight-load progress, and failures.

Patterns follow the format strings in the sglang 0.5.23 wheel (docs/sglang-startup-log.md lists them):
records look like ``[2026-05-01 10:00:21 TP3] msg``; tqdm bars arrive as ``\\r``-separated fragments, so the stream is
split on ``\\r`` and ``\\n`` and every pattern is matched with ``search`` (another rank's record can follow a bar
fragment on the same physical line). Tracebacks are multi-line and unprefixed.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

# Phases in start-up order; a tracker only moves forward.
PHASES = ("launch", "init", "weights", "kv_cache", "cuda_graph", "http", "warmup", "ready")
PHASE_TITLES = {
    "launch": "starting (imports, argument resolution)",
    "init": "distributed init (NCCL)",
    "weights": "loading weights",
    "kv_cache": "allocating KV cache",
    "cuda_graph": "capturing CUDA graphs",
    "http": "HTTP server up",
    "warmup": "warmup request",
    "ready": "SGLang logged: fired up and ready to roll",
}

_PREFIX = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] (.*)")
_TP = re.compile(r"\bTP(\d+)\b")

_PHASE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("init", re.compile(r"Init parallel begin\.")),
    ("weights", re.compile(r"Load weight begin\. avail mem=")),
    ("kv_cache", re.compile(r"KV Cache is allocated\. dtype: ")),
    ("cuda_graph", re.compile(r"Capture (?:target|draft) (?:prefill|decode|verify|extend) CUDA graph begin\.")),
    ("http", re.compile(r"INFO:\s+Uvicorn running on (https?://\S+)")),
    ("warmup", re.compile(r'"(?:GET /model_info|POST /generate|POST /v1/chat/completions) HTTP/1\.1"')),
    ("ready", re.compile(r"The server is fired up and ready to roll!")),
)
_INIT_END = re.compile(r"Init parallel ends\. elapsed=([\d.]+) s")
_WEIGHT_END = re.compile(r"Load weight end\. elapsed=([\d.]+) s, type=(\w+)")
_SHARDS = re.compile(
    r"(?:Multi-thread loading shards|Loading safetensors checkpoint shards|Loading pt checkpoint shards|"
    r"Multi-thread loading pt checkpoint shards):\s+(\d+)% Completed \| (\d+)/(\d+) \[([\d:]+)<([\d:?]+),\s*([^\]]+)\]"
)
_GRAPH_BAR = re.compile(
    r"Capturing (?:batches \(bs=\d+|prefill shape \(num_tokens=\d+) avail_mem=[\d.]+ GB\):\s+\d+%\|[^|]*\| (\d+)/(\d+)"
)
_KV = re.compile(r"KV Cache is allocated\. dtype: (\S+), #tokens: (\d+)")

# Failure detectors, most specific first: (kind, pattern, what it means, fix).
FAILURES: tuple[tuple[str, re.Pattern[str], str, str], ...] = (
    (
        "cuda_oom",
        re.compile(
            r"OutOfMemoryError: CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
            r"|Not enough memory\. Please try to increase --mem-fraction-static"
            r"|Loaded weights leave no GPU memory for the KV cache|Capture (?:prefill )?cuda graph "
            r"failed",
            re.I,
        ),
        "CUDA out of memory",
        "free the GPUs (nvidia-smi shows other processes) or lower memory.mem_fraction_static / "
        "memory.cuda_graph_max_bs_decode",
    ),
    (
        "nccl",
        re.compile(
            r"NCCL error|DistBackendError|DistStoreError|DistNetworkError|\[E\d+ [^\]]*ProcessGroupNCCL|"
            r"Watchdog caught collective operation timeout"
        ),
        "NCCL / distributed init failed",
        "run kimi-serve doctor (GPU count, topology), check NCCL_* env, rerun with "
        "NCCL_DEBUG=INFO in the profile's env",
    ),
    (
        "port_in_use",
        re.compile(r"\[Errno 98\] error while attempting to bind on address"),
        "the HTTP port is already in use",
        "stop whatever listens on server.port or change it",
    ),
    (
        "warmup_failed",
        re.compile(r"Initialization failed\. warmup error"),
        "SGLang's warmup request failed",
        "read the traceback in the log",
    ),
    (
        "rank_died",
        re.compile(r"Rank \d+ scheduler died during initialization"),
        "a scheduler process died during initialization",
        "check `dmesg -T | grep -i oom` (host OOM killer) and the log",
    ),
    (
        "watchdog",
        re.compile(r"Scheduler watchdog timeout"),
        "a scheduler step hung past --watchdog-timeout",
        "read the log; raise server.watchdog_timeout if it is legit",
    ),
    (
        "scheduler_exception",
        re.compile(r"(?:Scheduler|DetokenizerManager) hit an exception"),
        "a scheduler process raised an exception",
        "read the traceback in the log",
    ),
    (
        "traceback",
        re.compile(r"^Traceback \(most recent call last\):"),
        "the server raised an exception",
        "read the traceback in the log",
    ),
)
_TRACEBACK = FAILURES[-1][0], FAILURES[-1][2], FAILURES[-1][3]
_CHILD_FAILED = re.compile(r"Received sigquit from a child process|SIGQUIT received\. signum=")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b")


@dataclass
class Progress:
    """Where a start is: the phase, and for weight loading the shard bar of TP0."""

    phase: str = "launch"
    ranks_in_init: set[int] = field(default_factory=set)
    ranks_init_done: set[int] = field(default_factory=set)
    shards_done: int = 0
    shards_total: int = 0
    shard_rate: str = ""
    shard_eta: str = ""
    weight_loads_done: int = 0
    kv_tokens: int | None = None
    graphs_done: int = 0
    graphs_total: int = 0
    url: str | None = None


@dataclass(frozen=True)
class Event:
    kind: str  # "phase" | "shards" | "graphs" | "init_done" | "weights_done" | "failure"
    phase: str
    text: str  # one human line
    done: int = 0  # for "shards" / "graphs": the bar's n/N
    total: int = 0


@dataclass(frozen=True)
class Failure:
    kind: str
    summary: str
    fix: str
    lines: tuple[str, ...]  # the relevant log lines (the traceback or the matching record and its context)

    def report(self) -> str:
        return "\n".join([f"{self.summary} (fix: {self.fix})", *(f"  | {ln}" for ln in self.lines)])


def split_stream(buffer: str) -> tuple[list[str], str]:
    """Split decoded output on ``\\r`` and ``\\n``; return the complete pieces and the unfinished tail."""
    parts = re.split(r"\r\n|\r|\n", buffer)
    return [p for p in parts[:-1] if p.strip()], parts[-1]


# Warnings every start prints that say nothing about this server, left out of up's console (the log keeps them):
# the AWQ and GGUF quantizations' "only CUDA ... supports it" (imported on a CPU host: the simulator) and FastAPI's
# ORJSONResponse deprecation (SGLang's own error responses). Python writes a warning as two lines: "FILE:LINE:
# CATEGORY: MESSAGE", then the indented source line. Any other warning is echoed.
_KNOWN_NOISE = re.compile(
    r"\S+\.py:\d+: (?:UserWarning: Only CUDA(?:, \w+)* and \w+ support \w+(?: quantization)? currently\."
    r"|FastAPIDeprecationWarning: ORJSONResponse is deprecated\b)"
)


class KnownNoise:
    """One stream's filter of the known warnings (both of each one's lines); every other line passes."""

    def __init__(self) -> None:
        self._source_next = False

    def drop(self, line: str) -> bool:
        if self._source_next:
            self._source_next = False
            if line.startswith((" ", "\t")):  # the warning's source line
                return True
        if _KNOWN_NOISE.match(line):
            self._source_next = True
            return True
        return False


# uvicorn's access line of a health poll (up's, the router's): `127.0.0.1:PORT - "GET /health HTTP/1.1" 200 OK`
_HEALTH_ACCESS = re.compile(r'"GET /health(?:_generate)?(?:\?\S*)? HTTP/[\d.]+" \d{3}')


def is_health_access(line: str) -> bool:
    """An access-log line of a /health poll: left out of the last lines shown for a server that died."""
    return bool(_HEALTH_ACCESS.search(line))


def is_progress_bar(line: str) -> bool:
    """A tqdm fragment (weights or CUDA-graph bar): shown as progress, not echoed."""
    return bool(_SHARDS.search(line) or _GRAPH_BAR.search(line))


class StartupTracker:
    """Feed it lines; it returns events and remembers the first failure with the log lines that explain it."""

    def __init__(self, tp_size: int = 1) -> None:
        self.tp_size = tp_size
        self.progress = Progress()
        self.failure: Failure | None = None
        self.recent: deque[str] = deque(maxlen=200)
        self._trace: list[str] | None = None  # an open multi-line traceback record
        self._base = _TRACEBACK  # what an open traceback is, unless its lines name a specific cause

    def feed(self, line: str) -> list[Event]:
        self.recent.append(line)
        events: list[Event] = []
        if self._trace is not None:
            self._follow_traceback(line, events)
        elif self.failure is None:
            self._detect_failure(line, events)
        self._track(line, events)
        return events

    def flush(self) -> list[Event]:
        """End of stream: close an open traceback."""
        events: list[Event] = []
        if self._trace is not None:
            self._close_traceback(events)
        return events

    # ----------------------------------------------------------------------------------------- failures
    def _detect_failure(self, line: str, events: list[Event]) -> None:
        match = next(((k, s, f) for k, pattern, s, f in FAILURES if pattern.search(line)), None)
        if "Traceback (most recent call last)" in line or (match and match[0] == "scheduler_exception"):
            self._trace, self._base = [line], match or _TRACEBACK
        elif match:
            self._fail(*match, [line], events)
        elif _CHILD_FAILED.search(line):
            self._fail("child_failed", "a server subprocess failed", "read the log lines above", [line], events)

    def _follow_traceback(self, line: str, events: list[Event]) -> None:
        assert self._trace is not None
        if _PREFIX.match(line):  # a new record ends the traceback
            self._close_traceback(events)
            self._detect_failure(line, events)
            return
        self._trace.append(line)
        if _EXCEPTION_LINE.match(line):
            self._close_traceback(events)

    def _close_traceback(self, events: list[Event]) -> None:
        assert self._trace is not None
        trace, self._trace = self._trace, None
        kind, summary, fix = self._base
        specific = next(
            ((k, s, f) for k, pattern, s, f in FAILURES[:-2] if any(pattern.search(t) for t in trace)), None
        )
        if specific:
            kind, summary, fix = specific
        exc = next((t.strip() for t in reversed(trace) if _EXCEPTION_LINE.match(t)), "")
        exc = exc if len(exc) <= 240 else exc[:237] + "..."
        if self.failure is None:
            self._fail(kind, f"{summary}: {exc}" if exc else summary, fix, trace, events)

    def _fail(self, kind: str, summary: str, fix: str, lines: list[str], events: list[Event]) -> None:
        self.failure = Failure(kind, summary, fix, tuple(lines[-40:]))
        events.append(Event("failure", self.progress.phase, summary))

    # ----------------------------------------------------------------------------------------- phases
    def _advance(self, phase: str, events: list[Event], text: str) -> None:
        if PHASES.index(phase) > PHASES.index(self.progress.phase):
            self.progress.phase = phase
            events.append(Event("phase", phase, text))

    def _track(self, line: str, events: list[Event]) -> None:
        p = self.progress
        m = _PREFIX.search(line)
        tags, msg = (m.group(2).strip(), m.group(3)) if m else ("", line)  # a record's rank tags and message
        rank = int(m.group(1)) if (m := _TP.search(tags)) else 0
        for phase, pattern in _PHASE_PATTERNS:
            if not (m := pattern.search(msg)):
                continue
            if phase == "init":
                p.ranks_in_init.add(rank)
            if phase == "http":
                p.url = m.group(1)
            if phase == "kv_cache" and (kv := _KV.search(msg)):
                p.kv_tokens = int(kv.group(2))
            detail = {
                "kv_cache": f" ({p.kv_tokens} tokens)" if p.kv_tokens else "",
                "http": f" at {p.url}" if p.url else "",
            }.get(phase, "")
            self._advance(phase, events, f"{PHASE_TITLES[phase]}{detail}")
        if m := _INIT_END.search(msg):
            p.ranks_init_done.add(rank)
            if len(p.ranks_init_done) == self.tp_size:
                events.append(
                    Event("init_done", p.phase, f"distributed init done on {self.tp_size} rank(s) ({m.group(1)} s)")
                )
        if m := _SHARDS.search(line):  # a bar fragment may have another rank's record glued after it
            done, total = int(m.group(2)), int(m.group(3))
            if (done, total) != (p.shards_done, p.shards_total):
                p.shards_done, p.shards_total, p.shard_eta, p.shard_rate = done, total, m.group(5), m.group(6).strip()
                self._advance("weights", events, PHASE_TITLES["weights"])
                pct = 100 * done // max(total, 1)
                text = f"weights {done}/{total} shards ({pct}%), {p.shard_rate}, ETA {p.shard_eta}"
                events.append(Event("shards", p.phase, text, done, total))
        if (m := _WEIGHT_END.search(msg)) and rank == 0:
            p.weight_loads_done += 1
            which = "target" if p.weight_loads_done == 1 else "draft"
            text = f"{which} weights loaded in {m.group(1)} s ({m.group(2)})"
            events.append(Event("weights_done", p.phase, text))
        if m := _GRAPH_BAR.search(line):
            p.graphs_done, p.graphs_total = int(m.group(1)), int(m.group(2))
            self._advance("cuda_graph", events, PHASE_TITLES["cuda_graph"])
            done, total = p.graphs_done, p.graphs_total
            events.append(Event("graphs", p.phase, f"CUDA graphs {done}/{total}", done, total))
