"""The cold-start records under the state root (``coldstart/``), written atomically and read as empty when unreadable
(they are advisory): ``starts.json``, the last :data:`MAX_STARTS` starts (per-phase seconds, the figures at that
start, how it ended), and ``bandwidth.json``, the last bandwidth measured per filesystem (``st_dev``), so ``up``
predicts without re-probing.

The weight phase is predicted as the uncached bytes at the measured bandwidth plus the median overhead that recorded
starts of the same checkpoint showed above their own uncached floor (the copy to the GPUs, TP slicing, quantization);
without records it is the floor alone, a lower bound.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from kimi_serve.core.files import write_atomic
from kimi_serve.core.inputs import read_json
from kimi_serve.core.report import to_json
from kimi_serve.host.coldstart import Bandwidth, Figures

MAX_STARTS = 20
PHASE_KEYS = ("launch", "init", "weights", "kv_cache", "cuda_graph", "warmup", "contract")


def coldstart_dir(state_root: Path) -> Path:
    return state_root / "coldstart"


def _read(path: Path) -> Any:
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def _write(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=1), mode=0o600)


def cached_bandwidth(state_root: Path, device: int) -> dict[str, Any] | None:
    data = _read(coldstart_dir(state_root) / "bandwidth.json")
    entry = data.get(str(device)) if isinstance(data, dict) else None
    return entry if isinstance(entry, dict) and isinstance(entry.get("bytes_per_s"), (int, float)) else None


def remember_bandwidth(state_root: Path, bw: Bandwidth, path: str) -> None:
    target = coldstart_dir(state_root) / "bandwidth.json"
    data = _read(target)
    data = data if isinstance(data, dict) else {}
    data[str(bw.device)] = {**to_json(bw), "path": path, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    _write(target, data)


def read_starts(state_root: Path) -> list[dict[str, Any]]:
    """The recorded starts, oldest first."""
    data = _read(coldstart_dir(state_root) / "starts.json")
    return [s for s in data if isinstance(s, dict)] if isinstance(data, list) else []


def append_start(state_root: Path, record: dict[str, Any]) -> None:
    starts = [*read_starts(state_root), record][-MAX_STARTS:]
    _write(coldstart_dir(state_root) / "starts.json", starts)


def overhead_s(starts: list[dict[str, Any]], checkpoint_bytes: int) -> float | None:
    """Median seconds the recorded starts of this checkpoint spent in weights above their uncached floor."""
    extra = []
    for s in starts:
        w = (s.get("phases") or {}).get("weights")
        fig = s.get("figures") or {}
        floor = fig.get("uncached_floor_s")
        if (
            isinstance(w, (int, float))
            and isinstance(floor, (int, float))
            and fig.get("checkpoint_bytes") == checkpoint_bytes
        ):
            extra.append(max(w - floor, 0.0))
    return statistics.median(extra) if extra else None


def predict_weights_s(fig: Figures, starts: list[dict[str, Any]]) -> tuple[float | None, str]:
    """(predicted seconds for the weight phase, how it was made)."""
    base = fig.predicted_disk_s
    if base is None:
        return None, "no bandwidth measured"
    extra = overhead_s(starts, fig.checkpoint.total)
    if extra is None:
        return base, "uncached bytes / bandwidth (no recorded start of this checkpoint yet: a lower bound)"
    return base + extra, f"uncached bytes / bandwidth + {extra:.1f}s overhead (median of recorded starts)"


def describe_start(s: dict[str, Any]) -> str:
    """One line: when, how it ended, each phase, and weights against the floor."""
    ph = s.get("phases") or {}
    parts = [f"{k} {ph[k]:.1f}s" for k in PHASE_KEYS if isinstance(ph.get(k), (int, float))]
    fig = s.get("figures") or {}
    floor, w = fig.get("floor_s"), ph.get("weights")
    vs = ""
    if isinstance(floor, (int, float)) and isinstance(w, (int, float)) and floor > 0:
        vs = f"; weights {w / floor:.1f}x the disk floor {floor:.1f}s"
        if fig.get("checkpoint_bytes") and fig.get("cached_bytes"):
            vs += f" ({100 * fig['cached_bytes'] / fig['checkpoint_bytes']:.0f}% was cached)"
    total = s.get("total_s")
    head = f"{s.get('time', '?')} {s.get('profile', '?')} {s.get('outcome', '?')}"
    return f"{head}: {', '.join(parts) or 'no phases'}" + (f" (total {total:.1f}s)" if total else "") + vs
