"""verify FAILS when /server_info or /get_server_info hands out the API keys (SGLang 0.5.23 unpatched does; patch 0007
redacts them), naming the patch as the fix."""

from __future__ import annotations

import json

import pytest
from contract_server import ContractServer

from kimi_serve.verify import run_verify
from kimi_serve.verify.leaks import leaked_fields

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

KEY, ADMIN = "sk-live-0123456789", "adm-live-9876543210"
UPSTREAM = {
    "model_path": "/models/Kimi-K2.5",
    "api_key": KEY,
    "admin_api_key": ADMIN,
    "launch_command": f"--api-key {KEY} --admin-api-key {ADMIN} --model-path /models/Kimi-K2.5",
}
PATCHED = {
    "model_path": "/models/Kimi-K2.5",
    "api_key": "<redacted>",
    "admin_api_key": "<redacted>",
    "launch_command": "--api-key <redacted> --admin-api-key <redacted> --model-path /models/Kimi-K2.5",
}


@pytest.mark.parametrize(
    ("info", "fields"),
    [
        (UPSTREAM, ["api_key", "admin_api_key", "launch_command"]),
        (PATCHED, []),
        ({"api_key": None, "admin_api_key": None, "launch_command": "--model-path m"}, []),
        ({**PATCHED, "launch_command": f"--api-key={KEY} --model-path m"}, ["launch_command"]),
        ({"api_key": "<redacted>", "notes": f"started with {KEY}"}, ["another field"]),
    ],
)
def test_leaked_fields(info: dict, fields: list[str]) -> None:
    assert leaked_fields(info, KEY) == fields


def _leak(report):
    return [c for c in report.checks if c.code == "server_info_leaks_key"]


def test_a_leaking_server_fails_and_the_finding_never_shows_the_key() -> None:
    with ContractServer("correct", api_key=KEY, server_info=UPSTREAM) as srv:
        report = run_verify(srv.host, api_key=KEY, timeout=20.0)
    assert report.exit_code == 1 and report.status == "fail"
    assert all(p.passed for p in report.probes)  # the chat contract holds: the leak alone fails it
    (leak,) = _leak(report)
    assert leak.status == "fail" and "/server_info and /get_server_info" in leak.message
    assert "0007" in leak.fix and "patches apply" in leak.fix
    text = report.to_json()
    doc = json.loads(text)
    assert (doc["checks"][-1]["code"], doc["checks"][-1]["status"]) == ("server_info_leaks_key", "fail")
    assert doc["warnings"] == [] and doc["ok"] is False
    assert KEY not in text and ADMIN not in text


@pytest.mark.parametrize("info", [PATCHED, None])
def test_a_redacted_or_absent_server_info_passes(info: dict | None) -> None:
    with ContractServer("correct", api_key=KEY, server_info=info) as srv:
        report = run_verify(srv.host, api_key=KEY, timeout=20.0)
    assert report.exit_code == 0 and report.warnings == [] and _leak(report) == []


def test_the_failure_is_rendered_with_its_fix(capsys) -> None:
    from kimi_serve.cli import main

    with ContractServer("correct", server_info=UPSTREAM) as srv:
        code = main(["verify", "--host", srv.host, "--timeout", "20"])
    out = capsys.readouterr().out
    assert code == 1 and "server_info_leaks_key" in out and "0007" in out and KEY not in out
