"""Per-start phase durations and the weight-phase ETA of `up` (docs/coldstart.md defines the phases and spans).

A :class:`PhaseClock` stamps the moments the startup log changes phase, /health ready and the contract check's
verdict; the record goes to the state root's bounded history (:mod:`kimi_serve.host.starts`). The ETA while weights
load: the pace so far once shards are done, else the prediction minus the time spent.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimi_serve.core.report import to_json
from kimi_serve.host.coldstart import Figures, gb, seconds
from kimi_serve.process.startup_log import PHASES, Event

_LOADED = re.compile(r"loaded in ([\d.]+) s")
# phase -> (from the start of, to the start of the first of)
SPANS: dict[str, tuple[str, tuple[str, ...]]] = {
    "launch": ("launch", ("init", "weights")),
    "init": ("init", ("weights",)),
    "weights": ("weights", ("kv_cache", "cuda_graph", "http")),
    "kv_cache": ("kv_cache", ("cuda_graph", "http")),
    "cuda_graph": ("cuda_graph", ("http",)),
    "warmup": ("http", ("ready",)),
}


def clock_text(s: float) -> str:
    s = max(int(round(s)), 0)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class PhaseClock:
    def __init__(
        self, figures: Figures | None = None, predicted_weights_s: float | None = None, now: float | None = None
    ) -> None:
        self.figures = figures
        self.predicted = predicted_weights_s
        self.started = time.monotonic() if now is None else now
        self.at: dict[str, float] = {"launch": self.started}
        self.sglang_load_s: list[float] = []
        self.ready_at: float | None = None
        self.contract_at: float | None = None
        self.contract_ok: bool | None = None

    # ---------------------------------------------------------------------------------------------- live
    def on_event(self, ev: Event, now: float | None = None) -> Event:
        """Stamp ``ev``; a weight-shard event comes back with the ETA and the floor appended to its text."""
        now = time.monotonic() if now is None else now
        if ev.kind == "phase" and ev.phase in PHASES:
            self.at.setdefault(ev.phase, now)
        if ev.kind == "weights_done" and (m := _LOADED.search(ev.text)):
            self.sglang_load_s.append(float(m.group(1)))
        if ev.kind == "shards":
            self.at.setdefault("weights", now)
            return dataclasses.replace(ev, text=f"{ev.text} | {self.eta_text(ev.done, ev.total, now)}")
        return ev

    def eta_s(self, done: int, total: int, now: float) -> float | None:
        spent = now - self.at.get("weights", now)
        if total and done >= total:
            return 0.0
        if done > 0 and total:
            return spent * (total - done) / done
        if self.predicted is not None:
            return max(self.predicted - spent, 0.0)
        return None

    def eta_text(self, done: int, total: int, now: float) -> str:
        eta = self.eta_s(done, total, now)
        parts = [f"ETA {clock_text(eta)}" if eta is not None else "ETA unknown"]
        if self.predicted is not None:
            parts.append(f"predicted {clock_text(self.predicted)}")
        if self.figures is not None and self.figures.floor_s is not None:
            parts.append(f"disk floor {clock_text(self.figures.floor_s)}")
        return ", ".join(parts)

    def mark_ready(self, now: float | None = None) -> None:
        self.ready_at = time.monotonic() if now is None else now

    def mark_contract(self, ok: bool) -> None:
        self.contract_at = time.monotonic()
        self.contract_ok = ok

    # ---------------------------------------------------------------------------------------------- record
    def durations(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for name, (begin, ends) in SPANS.items():
            start = self.at.get(begin)
            end = next((self.at[e] for e in ends if e in self.at), None)
            out[name] = round(end - start, 3) if start is not None and end is not None else None
        ready, verdict = self.ready_at, self.contract_at
        out["contract"] = round(verdict - ready, 3) if ready is not None and verdict is not None else None
        return out

    def record(self, *, profile: str, outcome: str) -> dict[str, Any]:
        fig = to_json(self.figures) if self.figures is not None else {}
        return {
            "version": 1,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "profile": profile,
            "outcome": outcome,
            "phases": self.durations(),
            "sglang_load_weight_s": self.sglang_load_s,
            "ready_s": round(self.ready_at - self.started, 3) if self.ready_at is not None else None,
            "total_s": round(time.monotonic() - self.started, 3),
            "predicted_weights_s": self.predicted,
            "figures": fig,
        }

    def record_to(self, state_root: Path, profile: str, say: Callable[[str], None] | None = None) -> None:
        """Where :meth:`settled` saves (`up` sets it; without it nothing is written), and where it says so."""
        self._sink: tuple[Path, str, Callable[[str], None] | None] | None = (state_root, profile, say)

    def settled(self, outcome: str) -> dict[str, Any] | None:
        """The start is over (serving, or failed): append it to the history once (:mod:`kimi_serve.host.starts`) and
        say so. Returns the record when it was written now."""
        from kimi_serve.host.starts import append_start

        sink = getattr(self, "_sink", None)
        if sink is None or getattr(self, "done", False):
            return None
        self.done = True
        if len(self.at) < 2:  # it never left launch: nothing to say
            return None
        rec = self.record(profile=sink[1], outcome=outcome)
        try:
            append_start(sink[0], rec)
        except OSError:  # the state root is not writable
            return None
        if sink[2] is not None:
            sink[2](summary(rec))
        return rec


def summary(rec: dict[str, Any]) -> str:
    """The line `up` prints when a start is recorded."""
    ph = rec.get("phases") or {}
    parts = [f"{k} {seconds(v)}" for k, v in ph.items() if isinstance(v, (int, float))]
    fig = rec.get("figures") or {}
    floor = fig.get("floor_s")
    w = ph.get("weights")
    vs = (
        f"; weights took {w / floor:.1f}x the disk floor ({seconds(floor)})"
        if isinstance(w, (int, float)) and isinstance(floor, (int, float)) and floor > 0
        else ""
    )
    return "start phases: " + (", ".join(parts) or "none seen") + vs


def start_clock(profile: Any, state_root: Path, say: Callable[[str], None]) -> PhaseClock:
    """A clock for this start, with the weight-phase prediction from the host's figures (the bandwidth doctor
    remembered, probed now only when there is none), announced in one line."""
    from kimi_serve.host.floor import figures, loads_weights
    from kimi_serve.host.starts import predict_weights_s, read_starts

    clock = PhaseClock()
    if loads_weights(profile):
        try:
            fig = figures(profile, state_root, probe="if-unknown")
        except OSError as exc:
            say(f"cold start: cannot measure the checkpoint ({exc}); no prediction")
            fig = None
        if fig is not None and fig.checkpoint.files:
            predicted, how = predict_weights_s(fig, read_starts(state_root))
            clock = PhaseClock(fig, predicted)
            ck = fig.checkpoint
            cached = 100 * fig.cached / ck.total if ck.total else 0.0
            line = f"cold start: {gb(ck.total)} of weights in {ck.shards} shard(s), {cached:.0f}% in the page cache"
            if fig.floor_s is not None and predicted is not None:
                line += (
                    f"; disk floor {clock_text(fig.floor_s)} at {(fig.bandwidth or 0) / 1e9:.2f} GB/s; "
                    f"predicted weight phase {clock_text(predicted)} ({how})"
                )
            else:
                line += f"; bandwidth unknown ({fig.bandwidth_source})"
            say(line)
    clock.record_to(state_root, profile.name, say)
    return clock
