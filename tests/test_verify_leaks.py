"""verify warns when /server_info hands out the API keys (SGLang 0.5.23 unpatched does; patch 0007 redacts them)."""

from __future__ import annotations

import json

import pytest
from contract_server import ContractServer

from kimi_serve.verify import run_verify
from kimi_serve.verify.leaks import leaked_fields

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


def test_a_leaking_server_passes_with_a_warning_that_never_shows_the_key() -> None:
    with ContractServer("correct", api_key=KEY, server_info=UPSTREAM) as srv:
        report = run_verify(srv.host, api_key=KEY, timeout=20.0)
    assert report.exit_code == 0
    assert [w.code for w in report.warnings] == ["server_info_leaks_key"]
    assert "0007" in report.warnings[0].fix
    text = report.to_json()
    assert json.loads(text)["warnings"][0]["code"] == "server_info_leaks_key"
    assert KEY not in text and ADMIN not in text


@pytest.mark.parametrize("info", [PATCHED, None])
def test_a_redacted_or_absent_server_info_gives_no_warning(info: dict | None) -> None:
    with ContractServer("correct", api_key=KEY, server_info=info) as srv:
        report = run_verify(srv.host, api_key=KEY, timeout=20.0)
    assert report.exit_code == 0 and report.warnings == []


def test_the_warning_is_rendered(capsys) -> None:
    from kimi_serve.cli import main

    with ContractServer("correct", server_info=UPSTREAM) as srv:
        code = main(["verify", "--host", srv.host, "--timeout", "20"])
    out = capsys.readouterr().out
    assert code == 0 and "WARN server_info_leaks_key" in out and KEY not in out
