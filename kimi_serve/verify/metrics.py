"""A verify run as node_exporter textfile-collector metrics (docs/monitoring.md), written atomically.

The file is Prometheus text format without timestamps, replaced in one rename (temporary file in the same directory,
fsync, rename), so the collector reads the old file or the new one, never half. Every series carries the labels
``profile`` and ``endpoint``. The consecutive-failure count and the last success time carry over from the previous
file (for the same labels), so no other state is needed.

:func:`run_lock` keeps two runs writing one file from overlapping: a run that finds the lock held stops with exit 75.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.files import open_lock, write_atomic
from kimi_serve.verify.report import VerifyReport

PREFIX = "kimi_serve_contract"
# name -> (type, help)
FAMILIES: dict[str, tuple[str, str]] = {
    f"{PREFIX}_ok": ("gauge", "1 when the last contract check passed (structured tool_calls and reasoning_content)."),
    f"{PREFIX}_exit_code": ("gauge", "Exit code of the last check: 0 holds, 1 violated, 3 unreachable or not ready."),
    f"{PREFIX}_probe_pass": ("gauge", "1 when this probe and mode passed in the last check."),
    f"{PREFIX}_probe_latency_seconds": ("gauge", "Seconds this probe and mode took in the last check."),
    f"{PREFIX}_last_run_timestamp_seconds": ("gauge", "Unix time the last check finished."),
    f"{PREFIX}_last_success_timestamp_seconds": ("gauge", "Unix time of the last passing check (0: never seen)."),
    f"{PREFIX}_consecutive_failures": ("gauge", "Checks failed in a row (0 after a pass)."),
    f"{PREFIX}_duration_seconds": ("gauge", "Seconds the last check took, readiness included."),
    f"{PREFIX}_ready": ("gauge", "1 when /health answered 200 in the last check."),
    f"{PREFIX}_readiness_phase": ("gauge", "1 for the readiness phase seen last (refused, warming, ready, ...)."),
    f"{PREFIX}_draft_accept_length": (
        "gauge",
        "The speculative draft's mean accept length (tokens per verify step) in the last check; absent with "
        "speculative decoding off or no figure reported. 1.2 or less: a dead draft (verify fails).",
    ),
    f"{PREFIX}_draft_accept_floor": ("gauge", "The draft's expected accept length (speculative.accept_floor)."),
}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def read_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in a metrics file kimi-serve wrote; unparsable lines are skipped."""
    samples = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if line.startswith("#") or not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group(3) or "")}
        samples.append((m.group(1), labels, value))
    return samples


def previous_state(path: Path, profile: str, endpoint: str) -> tuple[int, float]:
    """(consecutive failures, last success unix time) from the file a previous run left, for these labels."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return 0, 0.0
    failures, success = 0, 0.0
    for name, labels, value in read_samples(text):
        if labels.get("profile") != profile or labels.get("endpoint") != endpoint:
            continue
        if name == f"{PREFIX}_consecutive_failures":
            failures = int(value)
        elif name == f"{PREFIX}_last_success_timestamp_seconds":
            success = value
    return failures, success


Family = tuple[str, str, str, list[tuple[dict[str, str], float]]]  # name, type, help, [(labels, value)]


def render_metrics(
    report: VerifyReport,
    *,
    profile: str,
    endpoint: str,
    finished: float,
    previous: tuple[int, float] = (0, 0.0),
    extra: list[Family] | None = None,
) -> str:
    """The textfile for ``report``; ``previous`` is :func:`previous_state` of the file it replaces."""
    base = {"profile": profile, "endpoint": endpoint}
    ok = report.exit_code == 0
    failures = 0 if ok else previous[0] + 1
    success = finished if ok else previous[1]
    rows: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in FAMILIES}
    rows[f"{PREFIX}_ok"].append((base, 1.0 if ok else 0.0))
    rows[f"{PREFIX}_exit_code"].append((base, float(report.exit_code)))
    for p in report.probes:
        labels = {**base, "probe": p.probe, "mode": p.mode}
        rows[f"{PREFIX}_probe_pass"].append((labels, 1.0 if p.passed else 0.0))
        rows[f"{PREFIX}_probe_latency_seconds"].append((labels, round(p.latency_s, 3)))
    rows[f"{PREFIX}_last_run_timestamp_seconds"].append((base, round(finished, 3)))
    rows[f"{PREFIX}_last_success_timestamp_seconds"].append((base, round(success, 3)))
    rows[f"{PREFIX}_consecutive_failures"].append((base, float(failures)))
    rows[f"{PREFIX}_duration_seconds"].append((base, round(report.elapsed_s, 3)))
    rows[f"{PREFIX}_ready"].append((base, 1.0 if report.readiness.ready else 0.0))
    rows[f"{PREFIX}_readiness_phase"].append(({**base, "phase": report.readiness.phase}, 1.0))
    acceptance = report.acceptance
    if acceptance is not None and acceptance.accept_length is not None:
        rows[f"{PREFIX}_draft_accept_length"].append((base, round(acceptance.accept_length, 3)))
        if acceptance.floor is not None:
            rows[f"{PREFIX}_draft_accept_floor"].append((base, float(acceptance.floor)))
    out = []
    own: list[Family] = [(name, kind, text, rows[name]) for name, (kind, text) in FAMILIES.items() if rows[name]]
    for name, kind, help_text, samples in own + (extra or []):  # then the caller's (service/traffic.py's counters)
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        out += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]
    return "\n".join(out) + "\n"


def write_metrics(
    path: Path, report: VerifyReport, *, profile: str, endpoint: str, extra: list[Family] | None = None
) -> str:
    """Replace ``path`` with the metrics of ``report`` (mode 0644: node_exporter runs as its own user)."""
    text = render_metrics(
        report,
        profile=profile,
        endpoint=endpoint,
        finished=time.time(),
        previous=previous_state(path, profile, endpoint),
        extra=extra,
    )
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise _unwritable(f"cannot write the metrics file: {exc.strerror or exc}", str(path)) from None
    return text


def _unwritable(message: str, where: str) -> KimiServeError:
    return KimiServeError(
        message,
        where=where,
        hint="run as root, or pass a --metrics-file in a writable directory",
        exit_code=ExitCode.ENVIRONMENT,
    )


def lock_file(path: Path) -> Path:
    """The lock next to the metrics file (node_exporter reads only ``*.prom``, so it ignores it)."""
    return path.with_name(path.name + ".lock")


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"the verify run of pid {info['pid']} (since {info['since']})"
    except (ValueError, KeyError, TypeError):
        return "another verify run"


@contextlib.contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """Hold the run lock of metrics file ``path``; exit 75 (the earlier run is still going) when it is held. A path
    that names no file (``/``, ``.``, ``..``, a directory) is exit 2 before anything is created."""
    if path.name in ("", ".", "..") or path.is_dir():
        raise KimiServeError(
            f"{path} names a folder, not a file (the metrics file and its .lock are written in a folder)",
            where="--metrics-file",
            hint="pass a file in node_exporter's textfile folder, e.g. /var/lib/prometheus/node-exporter/kimi.prom",
        )
    lock = lock_file(path)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        f: IO[str] = open_lock(lock)  # a link planted in the textfile folder is refused, never truncated
    except OSError as exc:
        raise _unwritable(f"cannot open the lock {lock}: {exc.strerror or exc}", "--metrics-file") from None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise KimiServeError(
                f"skipped: {_holder(f.read())} is still checking and writing {path}",
                where="--metrics-file",
                hint="nothing to do: the next run is due at the next interval",
                exit_code=ExitCode.LOCKED,
            ) from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)
