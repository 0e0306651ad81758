"""The real-traffic counters' journal reader (kimi_serve/service/traffic.py) on canned journalctl output: the first run
starts at the end (no backlog), later runs count after the stored cursor, a rejected cursor restarts cleanly, the
line and byte caps hold, the monitoring run writes the counters into the metrics file, and `status` shows them.
The classifier's patterns against SGLang's real log lines: tests/test_traffic_sglang.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from contract_server import ContractServer
from prometheus_client.parser import text_string_to_metric_families

from kimi_serve.core.proc import Completed
from kimi_serve.service.monitor import Monitoring, run_monitored
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.traffic import KINDS, classify, collect, read_state, state_file
from kimi_serve.verify import VerifyOptions
from kimi_serve.verify.parser_faults import PROBE_ID

UNIT = "sglang-kimi.service"
BAD = "[2026-12-02 05:26:47] Unexpected tool_call_id format: call_8f2a"
OWN_PROBE = f"[2026-12-02 05:26:49] Unexpected tool_call_id format: {PROBE_ID}"  # verify's own parser probe
REASONING = "[2026-12-02 05:26:48] Reasoning parsing error: K2-v3 reasoning parser requires force_reasoning=True"


class Journal:
    """A stand-in journalctl: entries with cursors c1..cN; rejects cursors it never issued (rotated away)."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed:
        args = list(argv)
        self.calls.append(args)
        assert args[:3] == ["journalctl", "-u", UNIT] and "-o" in args and "--show-cursor" in args
        n = int(args[args.index("-n") + 1])
        start = 0 if n == 0 else None
        if "--after-cursor" in args:
            cursor = args[args.index("--after-cursor") + 1]
            if not cursor.startswith("c") or int(cursor[1:]) > len(self.entries):
                return Completed(tuple(args), 1, "", "Failed to seek to cursor: Invalid argument")
            start = int(cursor[1:])
        shown = [] if n == 0 else self.entries[start:][:n]
        last = len(self.entries) if n == 0 else (start or 0) + len(shown)
        tail = [f"-- cursor: c{last}"] if self.entries and (shown or n == 0) else []
        return Completed(tuple(args), 0, "".join(f"{x}\n" for x in [*shown, *tail]), "")


def test_the_first_run_starts_at_the_end_then_counts_only_what_is_new(tmp_path: Path) -> None:
    paths, journal = ServicePaths(tmp_path, UNIT), Journal()
    journal.entries = [BAD] * 50  # a backlog from before the install
    assert sum(collect(paths, runner=journal).counts.values()) == 0
    journal.entries += ["[t] an ordinary line", BAD, REASONING]
    state = collect(paths, runner=journal)
    assert state.counts == {**dict.fromkeys(KINDS, 0), "tool_call_id": 1, "reasoning_error": 1}
    assert state.lines_read == 3 and state.cursor == "c53" and not state.error
    again = collect(paths, runner=journal)  # nothing new: the counts stay, the cursor too
    assert again.counts == state.counts and again.cursor == "c53"
    stored = json.loads(state_file(paths).read_text())
    assert stored["cursor"] == "c53" and stored["counts"]["tool_call_id"] == 1
    assert not list(paths.state_dir.glob("*.tmp"))


def test_a_rejected_cursor_restarts_at_the_end_without_a_backlog_storm(tmp_path: Path) -> None:
    paths, journal = ServicePaths(tmp_path, UNIT), Journal()
    journal.entries = [BAD]
    collect(paths, runner=journal)
    state_file(paths).write_text(state_file(paths).read_text().replace('"c1"', '"s=gone;i=9"'))
    journal.entries += [BAD] * 10
    state = collect(paths, runner=journal)
    assert state.restarts == 1 and state.counts["tool_call_id"] == 0 and state.cursor == "c11" and not state.error
    journal.entries.append(BAD)
    assert collect(paths, runner=journal).counts["tool_call_id"] == 1
    state_file(paths).write_text("{not json")  # a corrupt state file is a first run again
    assert collect(paths, runner=journal).counts["tool_call_id"] == 0


def test_a_unit_that_had_logged_nothing_is_read_from_the_last_run_on(tmp_path: Path) -> None:
    paths, journal = ServicePaths(tmp_path, UNIT), Journal()
    assert collect(paths, runner=journal, now=1000.0).cursor is None  # no entries yet: no cursor to keep
    journal.entries = [BAD]
    real = journal.__call__

    def since(argv: Sequence[str], *, timeout: float) -> Completed:
        if "--since" in argv:
            assert argv[argv.index("--since") + 1] == "@1000"
            return Completed(tuple(argv), 0, f"{BAD}\n-- cursor: c1\n", "")
        return real(argv, timeout=timeout)

    state = collect(paths, runner=since)
    assert state.counts["tool_call_id"] == 1 and state.cursor == "c1"


def test_each_run_is_bounded_by_lines_and_bytes(tmp_path: Path) -> None:
    paths, journal = ServicePaths(tmp_path, UNIT), Journal()
    journal.entries = ["x"]
    collect(paths, runner=journal)
    journal.entries += [BAD] * 30
    state = collect(paths, runner=journal, max_lines=10)
    assert state.counts["tool_call_id"] == 10 and state.capped_runs == 1
    assert journal.calls[-1][journal.calls[-1].index("-n") + 1] == "10"
    state = collect(paths, runner=journal, max_bytes=len(BAD) * 3 + 3)
    assert state.counts["tool_call_id"] == 13 and state.capped_runs == 2
    assert classify(["x" * 5000 + BAD]) == dict.fromkeys(KINDS, 0)  # only a line's first 4 KiB is matched


def test_journalctl_failing_is_recorded_not_fatal(tmp_path: Path) -> None:
    paths = ServicePaths(tmp_path, UNIT)

    def broken(argv: Sequence[str], *, timeout: float) -> Completed:
        return Completed(tuple(argv), 1, "", "No journal files were opened due to insufficient permissions.")

    state = collect(paths, runner=broken)
    assert state.error.endswith("insufficient permissions.") and state.cursor is None
    stored = read_state(paths)
    assert stored is not None and stored.error == state.error


@pytest.mark.usefixtures("loopback_port")
def test_the_monitoring_run_writes_the_counters_and_status_shows_them(cli, tmp_path: Path) -> None:
    metrics, journal = tmp_path / "kimi.prom", Journal()
    journal.entries = ["start"]
    with ContractServer("correct") as srv:
        mon = Monitoring(metrics, UNIT, "prod", tmp_path, journal=journal)
        for extra in ([], [BAD, OWN_PROBE, BAD, REASONING, OWN_PROBE]):
            journal.entries += extra
            report = run_monitored(srv.host, mon, VerifyOptions(timeout=30, max_tokens=256))
            assert report.exit_code == 0
    counts = {
        s.labels["kind"]: s.value
        for f in text_string_to_metric_families(metrics.read_text())
        for s in f.samples
        if s.name == "kimi_serve_traffic_parse_failures_total"
    }
    assert counts == {**dict.fromkeys(KINDS, 0.0), "tool_call_id": 2.0, "reasoning_error": 1.0}
    own = [s.value for f in text_string_to_metric_families(metrics.read_text()) for s in f.samples
           if s.name == "kimi_serve_traffic_own_probe_lines_total"]  # fmt: skip
    assert own == [2.0]
    out = json.loads(cli("status", "--unit-name", UNIT, "--root", str(tmp_path), "--json").out)["traffic"]
    assert out["total"] == 3 and out["counts"]["tool_call_id"] == 2 and "cursor" not in out
    assert out["own_probe_lines"] == 2 and out["lines_read"] == 5
    text = cli("status", "--unit-name", UNIT, "--root", str(tmp_path)).out
    assert "traffic:      parse failures 3 (tool_call_id 2, reasoning_error 1) in 5 log lines" in text
    assert not any(c for c in journal.calls if "--since" in c)


def test_a_run_under_another_root_does_not_read_this_hosts_journal(tmp_path: Path) -> None:
    assert Monitoring(None, UNIT, root=tmp_path).journal_runner() is None
    assert Monitoring(None, UNIT).journal_runner() is not None
