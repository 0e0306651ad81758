"""--json: one document on stdout with the same envelope on every path, success, failure, bad input, internal error
(docs/json.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.up_helpers import free_port

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

ENVELOPE = ("kind", "version", "ok", "exit_code", "findings")


def _doc(res, command: str):  # type: ignore[no-untyped-def]
    doc = json.loads(res.out)  # exactly one document
    assert list(doc)[:5] == list(ENVELOPE), doc
    assert doc["kind"] == f"kimi-serve-{command}" and doc["version"] == 1
    assert doc["exit_code"] == res.code and doc["ok"] is (res.code == 0)
    for f in doc["findings"]:
        assert {"code", "message", "fix"} <= set(f), f
    return doc


@pytest.mark.parametrize(
    "args, command, code",
    [
        (["render", "-p", "prod", "--json"], "render", 0),
        (["render", "-p", "prdo", "--json"], "render", 2),
        (["render", "--json", "-p", "prod", "--set", "server.prot=1"], "render", 2),
        (["check", "-p", "prod", "--json", "--bogus"], "check", 2),
        (["check", "-p", "sim", "--offline", "--json"], "check", None),
        (["doctor", "-p", "nosuch", "--json"], "doctor", 2),
        (["verify", "--json", "--timeout", "abc"], "verify", 2),
        (["patches", "status", "--json", "--site-packages", "/nonexistent-site"], "patches-status", None),
    ],
)
def test_envelope_on_every_path(cli, monkeypatch, args, command, code) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    res = cli(*args)
    doc = _doc(res, command)
    if code is not None:
        assert res.code == code, (res.code, res.err)
    if res.code:
        assert doc["findings"] and any(f.get("status", "fail") == "fail" for f in doc["findings"])


def test_usage_error_envelope_names_the_problem(cli) -> None:
    doc = _doc(cli("check", "-p", "prod", "--json", "--bogus"), "check")
    assert doc["findings"][0]["code"] == "usage" and "--bogus" in doc["findings"][0]["message"]


def test_render_envelope_keeps_argv_and_env(cli) -> None:
    doc = _doc(cli("render", "-p", "prod", "--json"), "render")
    assert (
        doc["argv"][1:4] == ["-P", "-m", "sglang.launch_server"]
        and doc["env"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    )


def test_verify_unreachable_is_an_envelope(cli) -> None:
    res = cli("verify", "--host", f"127.0.0.1:{free_port()}", "--json", "--timeout", "5")
    doc = _doc(res, "verify")
    assert res.code == 3 and doc["status"] == "unreachable" and doc["findings"]


def test_internal_error_is_an_envelope(cli, monkeypatch) -> None:
    import kimi_serve.profile.loader as loader

    def broken(*_a: object) -> None:
        raise ZeroDivisionError("injected fault")

    monkeypatch.setattr(loader, "load_profile", broken)
    doc = _doc(cli("render", "-p", "prod", "--json"), "render")
    assert doc["exit_code"] == 70 and doc["findings"][0]["code"] == "internal"
    assert "ZeroDivisionError: injected fault" in doc["findings"][0]["message"]


@pytest.mark.usefixtures("systemd_tools")
def test_service_commands_emit_the_envelope(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    root = tmp_path / "root"
    root.mkdir()
    dry = _doc(cli("install-service", "-p", "sim", "--root", str(root), "--dry-run", "--json"), "install-service")
    assert dry["dry_run"] is True and "ExecStart=" in dry["unit_text"]
    done = _doc(cli("install-service", "-p", "sim", "--root", str(root), "--json"), "install-service")
    assert done["ok"] and done["steps"]
    st = _doc(cli("status", "-p", "sim", "--root", str(root), "--json"), "status")
    assert st["installed"] is True and st["profile"] == "sim"
    _doc(cli("uninstall-service", "-p", "sim", "--root", str(root), "--dry-run", "--json"), "uninstall-service")
    bad = _doc(cli("install-service", "-p", "sim", "--root", str(root), "--json", "--now"), "install-service")
    assert bad["exit_code"] == 2 and "--now" in json.dumps(bad["findings"])
