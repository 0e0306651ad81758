"""The monitoring history: one JSON line per contract check, the last :data:`KEEP` kept, in the unit's state dir.

``var/lib/kimi-serve/service/NAME/monitor-history.jsonl``. Each append rewrites the file through
:func:`kimi_serve.service.state.write_atomic` (trimmed, then renamed over the old one) under an flock, so concurrent
runs never interleave and a crash leaves the old file or the new one. :func:`summary` is what ``status`` shows.
"""

from __future__ import annotations

import fcntl
import json
import time
from pathlib import Path
from typing import Any

from kimi_serve.core.files import mkdir_under, open_lock
from kimi_serve.core.inputs import load_json
from kimi_serve.service.state import ServicePaths, read_text, write_atomic

KEEP = 100
SHOWN = 10
HISTORY = "monitor-history.jsonl"


def history_file(paths: ServicePaths) -> Path:
    return paths.state_dir / HISTORY


def read_history(paths: ServicePaths) -> list[dict[str, Any]]:
    """Every record, oldest first (lines that are not JSON objects are skipped)."""
    records = []
    for line in (read_text(history_file(paths)) or "").splitlines():
        try:
            data = load_json(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            records.append(data)
    return records


def append_history(paths: ServicePaths, record: dict[str, Any]) -> None:
    mkdir_under(paths.root, paths.state_dir)
    with open_lock(paths.state_dir / (HISTORY + ".lock")) as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed
        records = [*read_history(paths), record][-KEEP:]
        write_atomic(paths, history_file(paths), "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def run_record(report: Any, *, profile: str, endpoint: str, started: float, finished: float) -> dict[str, Any]:
    """One history line for a :class:`kimi_serve.verify.VerifyReport`."""
    failed = [f"{p.probe}/{p.mode}: {p.findings[0].code}" for p in report.probes if not p.passed]
    if report.error is not None:
        detail = report.error.message
    elif failed:
        detail = next(p.reason for p in report.probes if not p.passed)
    else:
        detail = f"contract holds: {len(report.probes)} probes passed"
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(finished)),
        "started": round(started, 3),
        "finished": round(finished, 3),
        "status": report.status,
        "exit_code": report.exit_code,
        "profile": profile,
        "endpoint": endpoint,
        "suite": report.suite,
        "elapsed_s": round(report.elapsed_s, 3),
        "failed": failed,
        "detail": detail[:300],
    }


def summary(records: list[dict[str, Any]], now: float) -> dict[str, Any] | None:
    """Last results, when the contract last held, since when (and how long) it has been broken; None: no runs."""
    if not records:
        return None
    passes = [i for i, r in enumerate(records) if r.get("status") == "pass"]
    last_ok = records[passes[-1]] if passes else None
    broken_since = None
    if records[-1].get("status") != "pass":
        first_bad = records[passes[-1] + 1] if passes else records[0]
        broken_since = float(first_bad.get("started") or first_bad.get("finished") or now)
    return {
        "runs": len(records),
        "last": records[-SHOWN:],
        "contract_held_last": last_ok.get("time") if last_ok else None,
        "contract_held_last_unix": last_ok.get("finished") if last_ok else None,
        "broken_since_unix": broken_since,
        "broken_since": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(broken_since)) if broken_since else None,
        "broken_for_s": round(now - broken_since, 1) if broken_since is not None else None,
        "held_in_kept_history": bool(passes),
    }
