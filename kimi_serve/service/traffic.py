"""Real-traffic contract counters: SGLang's parse-failure log lines for the unit, counted since the last monitoring run.

The contract check (:mod:`kimi_serve.service.monitor`) sends a few probes; real traffic can still hit parser faults the
probes do not, and SGLang logs each one (:data:`PATTERNS`, driven out of SGLang by tests/test_traffic_sglang.py). Each
run reads the unit's journal after the stored cursor (``journalctl -u UNIT --after-cursor C --show-cursor -o cat``,
at most :data:`MAX_LINES` entries and :data:`MAX_BYTES`), classifies the lines (:func:`classify`) and adds them to the
counters kept with the cursor in ``var/lib/kimi-serve/service/NAME/traffic.json``. With no state, or a cursor
journalctl rejects (counted in ``restarts``), a run starts at the journal's end: an install never counts a backlog.
Lines of verify's own parser probe (:data:`kimi_serve.verify.parser_faults.PROBE_ID`) are counted apart, in
``own_probe_lines``, never as failures. The counters become ``kimi_serve_traffic_*`` series (docs/monitoring.md).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core.inputs import load_json
from kimi_serve.core.proc import Completed, NotInstalled, Runner, run
from kimi_serve.core.report import json_meta, rounded, to_json
from kimi_serve.service.state import ServicePaths, read_text, write_atomic
from kimi_serve.verify.parser_faults import PROBE_ID

STATE = "traffic.json"
MAX_LINES = 20000  # journal entries read per run (journalctl -n)
MAX_BYTES = 8 << 20  # text classified per run; the rest of a storm is skipped (and counted as capped)
LINE_BYTES = 4096  # one line's prefix that is matched
TIMEOUT = 30.0
CURSOR_PREFIX = "-- cursor: "
PREFIX = "kimi_serve_traffic"

# kind -> SGLang 0.5.23's log texts of that failure (substrings of the message; the line carries SGLang's
# "[time] " prefix). The one home of these patterns: tests/test_traffic_sglang.py checks each against real output.
PATTERNS: dict[str, tuple[str, ...]] = {
    # kimik2_detector: an id neither functions.NAME:N nor a bare counter (non-stream / stream): the call is dropped
    "tool_call_id": ("Unexpected tool_call_id format: ", "Kimi-K2 unrecognized tool_call_id "),
    # serving_chat: the output had <|tool_calls_section_begin|> but no call came out of it
    "tool_call_dropped": ("Tool call marker present but no complete call parsed",),
    # kimik2_detector (stream): a <|tool_call_begin|> inside an unfinished call; the unfinished one is discarded
    "tool_call_malformed": ("tool_call_begin without preceding tool_call_end",),
    # the parsers raised: serving_chat / serving_responses, and the detectors' own handlers
    "tool_call_error": (
        "Tool call parsing error: ",
        "Error in detect_and_parse: ",
        "Error in parse_streaming_increment: ",
    ),
    # serving_chat: the reasoning parser raised (the request answers 500)
    "reasoning_error": ("Reasoning parsing error: ",),
}
KINDS = tuple(PATTERNS)
_MATCH = re.compile("|".join(f"(?P<{kind}>{'|'.join(map(re.escape, texts))})" for kind, texts in PATTERNS.items()))


OWN = "own_probe"  # the key classify() counts verify's own probe lines under (not a kind: no failure of traffic)


def classify(lines: Iterable[str], *, own: dict[str, int] | None = None) -> dict[str, int]:
    """Parse-failure lines per kind (every kind present, 0 when none); a line counts once, for its first match.

    A matching line that carries verify's probe id is kimi-serve's own request, not traffic: it is left out (and
    counted in ``own[OWN]`` when ``own`` is given)."""
    counts = dict.fromkeys(KINDS, 0)
    for line in lines:
        head = line[:LINE_BYTES]
        m = _MATCH.search(head)
        if m and m.lastgroup:
            if PROBE_ID in head:
                if own is not None:
                    own[OWN] = own.get(OWN, 0) + 1
                continue
            counts[m.lastgroup] += 1
    return counts


@dataclass
class TrafficState:
    """What ``traffic.json`` keeps: the journal cursor and the counters since the state was created."""

    cursor: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    lines_read: int = 0
    capped_runs: int = 0  # runs that hit MAX_LINES or MAX_BYTES (lines beyond were not counted)
    restarts: int = 0  # runs that found no usable cursor and started at the journal's end
    own_probe_lines: int = 0  # parse-failure lines SGLang logged for verify's own probe (not counted as failures)
    last_run: float = field(default=0.0, metadata=json_meta(encode=rounded(3)))
    error: str = ""  # why the last run could not read the journal ("" when it could)


def state_file(paths: ServicePaths) -> Path:
    return paths.state_dir / STATE


def read_state(paths: ServicePaths) -> TrafficState | None:
    """The stored state; None when there is none (no run yet) or it is unreadable (the next run starts afresh)."""
    try:
        data = load_json(read_text(state_file(paths)) or "")
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    raw = data.get("counts")
    counts: dict[str, Any] = raw if isinstance(raw, dict) else {}
    cursor = data.get("cursor")
    return TrafficState(
        cursor=cursor if isinstance(cursor, str) and cursor else None,
        counts={k: _int(counts.get(k)) for k in KINDS},
        **{k: _int(data.get(k)) for k in ("lines_read", "capped_runs", "restarts", "own_probe_lines")},
        last_run=float(data.get("last_run") or 0.0) if isinstance(data.get("last_run"), int | float) else 0.0,
        error=str(data.get("error") or ""),
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def journalctl(argv: Sequence[str], *, timeout: float) -> Completed:
    try:
        return run(argv, timeout=timeout, install_hint="install systemd's journalctl")
    except NotInstalled as exc:
        return Completed(tuple(argv), 127, "", exc.message)


def _split(out: str) -> tuple[list[str], str | None]:
    """(message lines, the cursor journalctl printed last) of ``-o cat --show-cursor`` output."""
    lines = out.splitlines()
    if lines and lines[-1].startswith(CURSOR_PREFIX):
        return lines[:-1], lines[-1][len(CURSOR_PREFIX) :].strip() or None
    return lines, None


def _capped(lines: list[str], max_bytes: int) -> tuple[list[str], bool]:
    total = 0
    for i, line in enumerate(lines):
        total += len(line) + 1
        if total > max_bytes:
            return lines[:i], True
    return lines, False


def collect(
    paths: ServicePaths,
    *,
    runner: Runner = journalctl,
    max_lines: int = MAX_LINES,
    max_bytes: int = MAX_BYTES,
    now: float | None = None,
) -> TrafficState:
    """One run: read the journal after the stored cursor, add what it classifies, store the new state atomically."""
    state = read_state(paths) or TrafficState()
    base = ["journalctl", "-u", paths.unit, "-o", "cat", "--show-cursor", "--no-pager", "-q"]
    new_lines: list[str] = []
    cursor: str | None = None
    done: Completed | None = None
    if state.cursor is not None:
        done = runner([*base, "--after-cursor", state.cursor, "-n", str(max_lines)], timeout=TIMEOUT)
        if done.ok:
            new_lines, cursor = _split(done.out)
            cursor = cursor or state.cursor  # nothing new: journalctl prints no cursor
    elif state.last_run > 0 and not state.error:  # the unit had logged nothing yet: read from the last run on
        done = runner([*base, "--since", f"@{int(state.last_run)}", "-n", str(max_lines)], timeout=TIMEOUT)
        if done.ok:
            new_lines, cursor = _split(done.out)
    if cursor is None and not new_lines:  # first run, or journalctl rejected the cursor: start at the current end
        if state.cursor is not None:
            state.restarts += 1
        done = runner([*base, "-n", "0"], timeout=TIMEOUT)
        new_lines, cursor = [], _split(done.out)[1] if done.ok else None
    assert done is not None
    state.error = "" if done.ok else done.describe()[:300]
    lines, over = _capped(new_lines, max_bytes)
    own: dict[str, int] = {}
    for kind, n in classify(lines, own=own).items():
        state.counts[kind] += n
    state.own_probe_lines += own.get(OWN, 0)
    state.lines_read += len(lines)
    state.capped_runs += 1 if over or len(new_lines) >= max_lines else 0
    state.cursor = cursor or state.cursor
    state.last_run = time.time() if now is None else now
    write_atomic(paths, state_file(paths), json.dumps(to_json(state), sort_keys=True) + "\n")
    return state


def summary(state: TrafficState | None) -> dict[str, Any] | None:
    """What ``status`` shows: the counters and the bookkeeping (no cursor); None when no run has counted yet."""
    if state is None:
        return None
    out: dict[str, Any] = to_json(state)
    out.pop("cursor")
    out["total"] = sum(state.counts.values())
    return out


# (name after PREFIX, type, help, the state field counted; None: the journal read ok gauge)
_FAMILIES = (
    ("log_lines_total", "counter", "Journal lines of the unit read.", "lines_read"),
    (
        "log_capped_runs_total",
        "counter",
        "Runs that hit the per-run line or byte cap (lines beyond it were not counted).",
        "capped_runs",
    ),
    (
        "log_restarts_total",
        "counter",
        "Runs that found no usable journal cursor and started at the journal's end.",
        "restarts",
    ),
    (
        "own_probe_lines_total",
        "counter",
        "Parse-failure lines SGLang logged for kimi-serve's own parser probe (left out of the failures).",
        "own_probe_lines",
    ),
    ("log_read_ok", "gauge", "1 when the last run could read the unit's journal.", None),
)


def render(
    state: TrafficState, labels: dict[str, str]
) -> list[tuple[str, str, str, list[tuple[dict[str, str], float]]]]:
    """The counter families of ``state`` for the metrics file: (name, type, help, [(labels, value)])."""
    failures = (
        f"{PREFIX}_parse_failures_total",
        "counter",
        "SGLang parse-failure log lines of real traffic for the unit, by kind, since the counters were created.",
        [({**labels, "kind": kind}, float(state.counts[kind])) for kind in KINDS],
    )
    return [failures] + [
        (f"{PREFIX}_{name}", kind, text, [(labels, float(getattr(state, f)) if f else 0.0 if state.error else 1.0)])
        for name, kind, text, f in _FAMILIES
    ]
