"""Rendering of the report for a terminal, and the light import path of the command."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from contract_server import ContractServer

from kimi_serve.commands.verify_cmd import _progress_printer
from kimi_serve.verify import parser_faults, run_verify
from kimi_serve.verify.render import render_lines, render_table

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
    assert lines[4].split()[-1] == "content_missing"  # a failure's reason is its codes, said in full below
    said = [line for line in lines if line.startswith("FAIL content_missing")]
    assert len(said) == 1, lines  # reasoning non-stream and stream: one line for the code, with both
    assert said[0].startswith("FAIL content_missing (reasoning non-stream+stream): content is empty")
    assert "(fix: keep `</think>`" in said[0]
    warned = [line for line in lines if line.startswith("WARN ")]
    # reasoning x 2, the two loops' answers; the stand-in's unpatched stream shape, Moonshot's dialect ignored
    assert lines[-1] == f"verify: contract VIOLATED: 4 failed, {len(warned)} warnings, 9 passed"
    assert len(warned) == 2


@pytest.mark.parametrize("render", [render_lines, render_table], ids=["lines", "table"])
def test_full_suite_says_each_warning_once_with_its_probes(render) -> None:
    # the stand-in streams tool calls as unpatched SGLang 0.5.23 does: every streamed tool probe warns
    # stream_null_tool_fields (five in the full suite), which was printed once per probe
    with ContractServer() as srv:
        report = run_verify(srv.host, timeout=60, suite="full")
    assert report.exit_code == 0, [p.to_dict() for p in report.probes if not p.passed]
    lines = render(report).splitlines()
    warned = [p for p in report.probes if any(w.code == "stream_null_tool_fields" for w in p.warnings)]
    assert len(warned) >= 5
    said = [line for line in lines if "stream_null_tool_fields" in line]
    assert len(said) == 1, said
    assert all(f"{p.probe} " in said[0] for p in warned)
    assert said[0].startswith("WARN stream_null_tool_fields (") and "(fix: " in said[0]
    count = len([line for line in lines if line.startswith("WARN ")])
    codes = {w.code for p in report.probes for w in p.warnings} | {c.code for c in report.checks if c.status == "warn"}
    assert count == len(codes) >= 2  # one line per warning code, and the last line counts them
    assert re.fullmatch(
        rf"verify: contract holds: {count} warnings, {len(report.probes)} passed \(\d+\.\ds\)", lines[-1]
    ), lines[-1]


def test_parsers_left_out_name_one_cause_and_no_patch_advice() -> None:
    # a server started without both parsers (its /model_info says so) whose engine is unpatched: the dense FAILs
    # share one cause the last line names, and the kimi_k2 parser's faults are not this server's (no patch advice)
    with ContractServer("no-parsers", parser_endpoint=True) as srv:
        report = run_verify(srv.host, timeout=30)
    text = render_lines(report)
    failed = [p for p in report.probes if not p.passed]
    assert len(failed) >= 5
    assert text.splitlines()[-1].endswith(
        f"; cause: started without `--tool-call-parser kimi_k2 --reasoning-parser kimi_k2`: {len(failed)} probes failed"
    )
    assert parser_faults.FIX not in text  # the parser faults' patch advice (other advice may name other patches)
    parser = [c for c in report.checks if c.code.startswith("parser.")]
    assert [c.status for c in parser] == ["skip", "skip"]
    assert all("runs without --tool-call-parser" in c.message for c in parser)
    for line in text.splitlines():  # each code once
        if line.startswith("FAIL ") and "(" in line.split(":")[0]:
            assert sum(other.startswith(line.split(" (")[0] + " (") for other in text.splitlines()) == 1


def test_a_server_with_the_parsers_keeps_the_patch_advice() -> None:
    # kin: the same unpatched parser behind a server that runs it: the warnings and their fix stay
    with ContractServer(parser_endpoint=True) as srv:
        report = run_verify(srv.host, timeout=30)
    assert report.server == {"tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2"}
    parser = [c for c in report.checks if c.code.startswith("parser.")]
    assert [c.status for c in parser] == ["warn", "warn"] and all("patches apply" in c.fix for c in parser)
    assert render_lines(report).splitlines()[-1].startswith("verify: contract holds: ")


def test_one_tool_parser_left_out_names_that_flag_alone() -> None:
    with ContractServer("no-tool-parser") as srv:
        report = run_verify(srv.host, timeout=30)
    last = render_lines(report).splitlines()[-1]
    assert "cause: started without `--tool-call-parser kimi_k2`: " in last and "--reasoning-parser" not in last


def test_a_refused_key_is_the_cause_of_every_failure() -> None:
    # kin of the parser cause: a server-wide fault met by every probe is named once on the last line
    with ContractServer(api_key="right-key") as srv:
        report = run_verify(srv.host, timeout=30, model="kimi-k2.5", api_key="wrong-key")
    failed = [p for p in report.probes if not p.passed]
    last = render_lines(report).splitlines()[-1]
    assert last.endswith(
        f"; cause: HTTP 401: the server rejected the API key (key from caller): {len(failed)} probes failed"
    )


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
