"""Run records: what a foreground `kimi-serve up` runs now, for `status` (docs/up.md, "Run records", lists the fields).

`up` writes ``STATE_ROOT/runs/up-PID.json`` once its locks are held and removes it when it ends. ``pid_start`` (its
start time, /proc/PID/stat field 22) tells a reused pid apart: a record left by a killed `up` reads as stale
(:func:`read_runs`) and :func:`prune` removes it; a stale record is never reported running.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kimi_serve.core.files import write_atomic
from kimi_serve.core.inputs import read_json
from kimi_serve.core.settings import state_root

RUNS_DIR = "runs"


def runs_dir(state_dir: Path | None = None) -> Path:
    return state_root(state_dir) / RUNS_DIR


def stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat's fields from the third (state, ppid, pgrp, ...) on; [] when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` (clock ticks after boot, field 22), or None when no such process."""
    fields = stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


@dataclass(frozen=True)
class Run:
    path: Path
    record: dict[str, Any]
    running: bool  # False: stale (its `up` is gone, or its pid now belongs to another process)

    def parts(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The record's ``router`` (None: one server) and ``replicas``, as mappings: a record is read back as any
        JSON, so odd fields are left out, never raised on."""
        router, reps = self.record.get("router"), self.record.get("replicas")
        replicas = [x for x in reps if isinstance(x, dict)] if isinstance(reps, list) else []
        return (router if isinstance(router, dict) else None), replicas

    def to_json(self) -> dict[str, Any]:
        return {**self.record, "state": "running" if self.running else "stale", "record": str(self.path)}

    def line(self) -> str:
        r = self.record
        head = f"up of profile {r.get('profile')} ({r.get('engine')}) on {r.get('endpoint')}, pid {r.get('pid')}"
        if not self.running:
            return f"STALE record {self.path.name}: {head}; that `up` is gone (record pruned)"
        parts = [f"{head}, since {r.get('started')}, log {r.get('log')}"]
        router, reps = self.parts()
        if router is not None:
            parts.append(f"router {router.get('endpoint')}")
            parts += [f"replica {x.get('index')} {x.get('endpoint')} (log {x.get('log')})" for x in reps]
        return "; ".join(parts)


@contextlib.contextmanager
def run_record(fields: Mapping[str, Any], *, state_dir: Path | None = None) -> Iterator[Path | None]:
    """Leave a record of this process's run while the block runs (None when the state root cannot be written: the
    server still starts, `status` just cannot list it)."""
    pid = os.getpid()
    path = runs_dir(state_dir) / f"up-{pid}.json"
    record = {
        "pid": pid,
        "pid_start": process_start(pid),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        **fields,
    }
    try:
        write_atomic(path, json.dumps(record, indent=2))
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def read_runs(state_dir: Path | None = None) -> list[Run]:
    """Every run record, each marked running or stale (a torn or foreign file in the folder is skipped)."""
    runs = []
    for path in sorted(runs_dir(state_dir).glob("up-*.json")):
        try:
            record = read_json(path)
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
            continue
        started = process_start(record["pid"])
        running = started is not None and record.get("pid_start") in (None, started)
        runs.append(Run(path, record, running))
    return runs


def prune(runs: list[Run]) -> None:
    """Remove the records of stale runs."""
    for run in runs:
        if not run.running:
            with contextlib.suppress(OSError):
                run.path.unlink()
