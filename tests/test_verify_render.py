"""Rendering of the report for a terminal, and the light import path of the command."""

from __future__ import annotations

import subprocess
import sys

import pytest
from contract_server import ContractServer

from kimi_serve.commands.verify_cmd import _progress_printer
from kimi_serve.verify import run_verify
from kimi_serve.verify.render import render_table

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")


def test_table_has_probe_by_mode_rows_and_the_fixes() -> None:
    with ContractServer("think-stripped") as srv:
        report = run_verify(srv.host, timeout=20)
    lines = render_table(report).splitlines()
    assert lines[1].split() == ["PROBE", "MODE", "RESULT", "LATENCY", "REASON"]
    rows = [line.split()[:3] for line in lines[2:6]]
    assert rows == [
        ["tool", "non-stream", "pass"],
        ["tool", "stream", "pass"],
        ["reasoning", "non-stream", "FAIL"],
        ["reasoning", "stream", "FAIL"],
    ]
    assert all(len(line) < 140 for line in lines[2:6])
    assert any(
        line.startswith("reasoning/stream: content is empty") and "(fix: keep `</think>`" in line for line in lines
    )
    assert lines[-1] == "verify: contract VIOLATED (3 of 10 probes failed)"  # reasoning x 2, the loop's answer


def test_progress_prints_each_phase_once(capsys) -> None:
    show = _progress_printer("http://127.0.0.1:30000")
    for phase, detail in [
        ("refused", "connection refused"),
        ("refused", "connection refused"),
        ("warming", "HTTP 503 on /health (warming up)"),
        ("ready", "HTTP 200 on /health"),
    ]:
        show(phase, 1.0, detail)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "503" in err[1] and err[2].startswith("verify: http://127.0.0.1:30000: HTTP 200")


def test_cli_import_stays_light() -> None:
    code = (
        "import sys, kimi_serve.cli; heavy = {'requests', 'jsonschema', 'yaml'} & set(sys.modules);"
        " assert 'kimi_serve.verify.runner' not in sys.modules; print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "requests" not in out and "jsonschema" not in out
