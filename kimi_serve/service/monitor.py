"""One monitoring run (what the verify timer starts): the contract check, the unit's real-traffic parse-failure
counters (:mod:`kimi_serve.service.traffic`), then its metrics file and history line.

The run holds the metrics file's run lock (:func:`kimi_serve.verify.metrics.run_lock`) from before the check to after
the writes, so a run started while another is still going stops with exit 75 instead of doubling the load; the
verify unit treats 75 as success (``SuccessExitStatus=75``), so a skipped run does not alert.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.proc import Runner
from kimi_serve.service.history import append_history, run_record
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.traffic import collect, journalctl, render
from kimi_serve.verify import VerifyOptions, VerifyReport, parse_target, run_verify
from kimi_serve.verify.metrics import run_lock, write_metrics


@dataclass(frozen=True)
class Monitoring:
    """Where a run's results go: a textfile-collector file and/or the history of a unit, labelled ``profile``."""

    metrics_file: Path | None = None
    unit: str | None = None  # NAME.service whose history gets the run
    profile: str = ""
    root: Path = Path("/")
    # runs journalctl for the traffic counters; None: the real one, and only when root is the running system's "/"
    journal: Runner | None = None

    def journal_runner(self) -> Runner | None:
        if self.journal is not None:
            return self.journal
        return journalctl if self.root == Path("/") else None


def run_monitored(host: str, monitoring: Monitoring, options: VerifyOptions) -> VerifyReport:
    """One run: verify ``host`` with ``options``, under the run lock, then its metrics file and history line."""
    target, m = parse_target(host), monitoring
    unit = ServicePaths(m.root, m.unit) if m.unit is not None else None
    lock = m.metrics_file or (unit.state_dir / "monitor" if unit and m.unit else None)
    with run_lock(lock) if lock is not None else contextlib.nullcontext():
        started = time.time()
        report = run_verify(target, options)
        finished = time.time()
        labels = {"profile": monitoring.profile, "endpoint": target.base_url}
        # the unit's real traffic since the last run: SGLang's parse-failure log lines (service/traffic.py)
        runner = m.journal_runner()
        traffic = collect(unit, runner=runner) if unit is not None and runner is not None else None
        if monitoring.metrics_file is not None:
            extra = render(traffic, labels) if traffic is not None else None
            write_metrics(monitoring.metrics_file, report, **labels, extra=extra)
        if unit is not None:
            append_history(unit, run_record(report, started=started, finished=finished, **labels))
    return report
