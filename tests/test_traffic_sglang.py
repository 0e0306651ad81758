"""The real-traffic classifier (kimi_serve/service/traffic.py) against the log lines SGLang 0.5.23 itself writes.

tests/traffic_log_probe.py drives SGLang's own serving layer and kimi_k2 parsers into each parse failure, in one
CPU SGLang interpreter on stock sglang (the ``stock_sglang`` fixture: the engine carries prod's Kimi set; all
scenarios in it; its stand-in, the model's raw output, is named in its docstring), and returns what SGLang logged per scenario in its own log format. Each scenario's lines must land in exactly its kind;
then all of them, as canned journal output, go through the journal reader into the counters and the metrics file.
What SGLang logs for verify's own parser probes (the timer runs them every interval) is counted apart, never as a
failure.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sim_pool import SGLangSession, stock_environ

from kimi_serve.core.proc import Completed
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.traffic import KINDS, OWN, PATTERNS, classify, collect, render
from kimi_serve.verify.metrics import write_metrics
from kimi_serve.verify.parser_faults import CASES
from kimi_serve.verify.report import Readiness, VerifyReport

PROBE = Path(__file__).with_name("traffic_log_probe.py")
REPO = Path(__file__).resolve().parent.parent
EXPECTED = {  # scenario -> the kinds its lines count
    "unexpected_id": {"tool_call_id": 1, "tool_call_dropped": 1},
    "unexpected_id_stream": {"tool_call_id": 1},
    "unclosed_call_stream": {"tool_call_malformed": 1},
    "detector_error_stream": {"tool_call_error": 1},
    "reasoning_error": {"reasoning_error": 1},
}


@pytest.fixture(scope="module")
def logged(sglang_session: SGLangSession, stock_sglang: Path) -> dict:
    proc = subprocess.run(
        [sglang_session.python, str(PROBE), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=stock_environ(stock_sglang),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_each_failure_sglang_logs_lands_in_its_kind(logged: dict) -> None:
    for scenario, expected in EXPECTED.items():
        lines = logged["logs"][scenario]["lines"]
        assert classify(lines) == {**dict.fromkeys(KINDS, 0), **expected}, (scenario, lines)
    assert logged["logs"]["reasoning_error"]["status"] == 500
    driven = {text for lines in logged["logs"].values() for line in lines for ts in PATTERNS.values() for text in ts
              if text in line}  # fmt: skip
    # the texts no scenario reaches (the parsers' catch-alls) are still SGLang's own, verbatim in its sources
    site = Path(logged["module"]).parent / "srt"
    sources = "".join(p.read_text() for d in ("function_call", "entrypoints/openai") for p in (site / d).glob("*.py"))
    for text in {t for ts in PATTERNS.values() for t in ts} - driven:
        assert text.strip().rstrip(":") in sources, text


def test_what_sglang_logs_for_verifys_own_parser_probe_is_no_failure(logged: dict) -> None:
    lines = [line for code, _, _ in CASES for line in logged["logs"][code]["lines"]]
    assert all(logged["logs"][code]["status"] == 200 for code, _, _ in CASES)
    # SGLang does log the unexpected-id probe, in the text a real dropped call logs
    assert sum("Unexpected tool_call_id format: " in line for line in lines) == 1, lines
    own: dict[str, int] = {}
    assert classify(lines, own=own) == dict.fromkeys(KINDS, 0) and own == {OWN: 1}
    # and a real client's call with an id outside the patterns still counts, in the same text
    real = [line for line in logged["logs"]["unexpected_id"]["lines"] if "Unexpected tool_call_id" in line]
    assert classify(real)["tool_call_id"] == 1


def test_the_journal_reader_counts_them_into_the_metrics_file(logged: dict, tmp_path: Path) -> None:
    paths = ServicePaths(tmp_path, "sglang-kimi.service")
    journal = [line for scenario in EXPECTED for line in logged["logs"][scenario]["lines"]]

    def runner(argv: Sequence[str], *, timeout: float) -> Completed:
        body = journal if "--after-cursor" in argv else []
        return Completed(tuple(argv), 0, "".join(f"{x}\n" for x in [*body, "-- cursor: s=1;i=2"]), "")

    collect(paths, runner=runner)  # the first run starts at the end: nothing counted
    state = collect(paths, runner=runner)
    totals = {kind: sum(e.get(kind, 0) for e in EXPECTED.values()) for kind in KINDS}
    assert state.counts == totals and state.lines_read == len(journal)
    metrics = tmp_path / "kimi.prom"
    report = VerifyReport(target="http://127.0.0.1:30000", suite="quick", readiness=Readiness(True, "ready", 0.1))
    labels = {"profile": "prod", "endpoint": "http://127.0.0.1:30000"}
    write_metrics(metrics, report, **labels, extra=render(state, labels))
    samples = {
        s.labels["kind"]: s.value
        for f in text_string_to_metric_families(metrics.read_text())
        for s in f.samples
        if s.name == "kimi_serve_traffic_parse_failures_total"
    }
    assert samples == {k: float(v) for k, v in totals.items()}
