"""The contract monitor under a REAL systemd (PID 1 in a systemd-nspawn container): install-service --now installs the
simulator unit plus its verify timer; the timer keeps the metrics file and the status history true as the served API
breaks (the simulator replaced by the contract STAND-IN in its no-tool-parser mode: raw tool-call tokens in content)
and recovers (the simulator back); OnFailure= starts the alert template; the real-traffic counters read the unit's own journal: a client's call whose id
SGLang's real kimi_k2 detector (in the simulator's process) drops is counted, the check's own parser probe, which makes
SGLang log the same text every run, is not; a check slower than the interval is never
run twice at once; uninstall-service removes the timer units. The monitoring units run sandboxed (#29.6): the check as
root without capabilities, reading the service user's 0600 key file only through LoadCredential= and writing only its
records (which stay root's: the service user cannot write them) and the metrics directory; the alert as a DynamicUser.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from contract_server import ContractServer
from prometheus_client.parser import text_string_to_metric_families

from kimi_serve.service.unit import UnitContext

UNIT = "kimi-mon-test.service"
VERIFY, TIMER = "kimi-mon-test-verify.service", "kimi-mon-test-verify.timer"
METRICS = "/var/lib/kimi-serve/mon-test.prom"  # a directory the sandbox shares (scratch copy)
SECRET = "/etc/kimi-serve/mon-test.yaml"
KEY = "mon-test-key-7d1c"
INTERVAL = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def test_timer_keeps_metrics_and_history_true(sandbox: Any, sglang_python: str, tmp_path: Path) -> None:
    port = _free_port()
    profile = tmp_path / "mon.yaml"
    profile.write_text(
        f"extends: sim\nserver:\n  port: {port}\n  api_key_file: {SECRET}\nstartup:\n  timeout: 180\n"
        f"service:\n  unit_name: {UNIT.removesuffix('.service')}\n"
        f"monitor:\n  interval: {INTERVAL}\n  randomized_delay: 0\n  timeout: 30\n"
        f"  metrics_file: {METRICS}\n"
    )
    kimi = UnitContext.detect().kimi_serve
    # service.user (kimi-serve) is created in the container's own user database, and may traverse /root (0700, where
    # CI keeps the interpreters) inside the container only, as test_service_systemd does
    env = {
        "KIMI_SERVE_SGLANG_PYTHON": sglang_python,
        "KIMI_SERVE_ACCOUNTS_ROOT": f"/proc/{sandbox.leader}/root",
        "KIMI_SERVE_API_KEY": KEY,
    }
    subprocess.run(["nsenter", "-t", str(sandbox.leader), "-m", "--", "chmod", "711", "/root"], check=True)

    def cli(*args: str) -> tuple[int, str]:
        done = sandbox.run([kimi, *args], env=env)
        return done.returncode, done.stdout + done.stderr

    def systemctl(*args: str) -> str:
        return str(sandbox.run(["systemctl", *args]).stdout.strip())

    def ok() -> float | None:
        """kimi_serve_contract_ok from the file, read through prometheus_client's parser (None: no file yet)."""
        text = sandbox.run(["cat", METRICS]).stdout
        if not text:
            return None
        values = [
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "kimi_serve_contract_ok" and s.labels == {"profile": "mon", "endpoint": endpoint}
        ]
        assert len(values) == 1, text
        return values[0]

    def traffic() -> dict[str, float]:
        """The real-traffic series of the metrics file: failures by kind, plus the own-probe lines under "own"."""
        out: dict[str, float] = {}
        for f in text_string_to_metric_families(sandbox.run(["cat", METRICS]).stdout):
            for s in f.samples:
                if s.name == "kimi_serve_traffic_parse_failures_total":
                    out[s.labels["kind"]] = s.value
                elif s.name == "kimi_serve_traffic_own_probe_lines_total":
                    out["own"] = s.value
        return out

    def client_call(call_id: str) -> list[Any]:
        """A client's request to the unit's parser (POST /parse_function_call): a call whose id stock SGLang 0.5.23
        drops (and logs); the Kimi patch set keeps it (and still logs it)."""
        text = f'<|tool_calls_section_begin|><|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{{"city": "Oslo"}}'
        body = {"text": text + "<|tool_call_end|><|tool_calls_section_end|>", "tool_call_parser": "kimi_k2",
                "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}  # fmt: skip
        req = urllib.request.Request(
            f"{endpoint}/parse_function_call",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
        )
        with urllib.request.urlopen(req, timeout=30) as reply:
            return list(json.loads(reply.read())["calls"])

    def history() -> list[dict[str, Any]]:
        """Every record the checks appended (status shows the last 10 of them)."""
        text = sandbox.run(
            ["cat", f"/var/lib/kimi-serve/service/{UNIT.removesuffix('.service')}/monitor-history.jsonl"]
        ).stdout
        return [json.loads(line) for line in text.splitlines()]

    endpoint = f"http://127.0.0.1:{port}"
    rc, out = cli("install-service", "--profile", str(profile), "--now")
    assert rc == 0, out
    assert systemctl("is-active", TIMER) == "active" and systemctl("is-enabled", TIMER) == "enabled"
    _wait("the first check to pass", lambda: ok() == 1)  # with the key: systemd handed the 0600 file over

    # the sandbox is live, and the records stay root's: the service user (the key file's owner) cannot write them
    shown = sandbox.run(
        ["systemctl", "show", VERIFY, "-p", "User", "-p", "CapabilityBoundingSet", "-p", "ProtectSystem"]
    ).stdout.split()
    assert sorted(shown) == ["CapabilityBoundingSet=", "ProtectSystem=strict", "User=root"], shown
    uid = sandbox.run(["stat", "-c", "%u", SECRET]).stdout.strip()
    assert uid not in ("", "0"), uid
    records = f"/var/lib/kimi-serve/service/{UNIT.removesuffix('.service')}"
    for path in (records, f"{records}/monitor-history.jsonl", METRICS):
        assert sandbox.run(["stat", "-c", "%u", path]).stdout.strip() == "0", path
    forge = sandbox.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "sh",
            "-c",
            f"echo forged >> {records}/monitor-history.jsonl || echo x > {records}/last-good.json",
        ]
    )
    assert forge.returncode != 0 and "forged" not in sandbox.run(["cat", f"{records}/monitor-history.jsonl"]).stdout

    # real traffic: two client calls the unit's SGLang parser drops land in its journal, and the next run counts them;
    # the check's own parser probe makes SGLang log the same text every run, and is never counted
    # the engine carries prod's Kimi patch set: the call is kept, and SGLang still logs the id it did not expect
    # ("Unexpected tool_call_id format: ..."), which is what the monitor counts as real traffic's parse failures
    for call_id in ("call_Qx81", "toolu_01A"):
        assert [c["name"] for c in client_call(call_id)] == ["get_weather"], call_id
    _wait("the timer to count the two dropped calls", lambda: traffic().get("tool_call_id") == 2)
    runs = len(history())
    _wait("two more checks", lambda: len(history()) >= runs + 2)
    seen = traffic()
    assert seen["tool_call_id"] == 2 and sum(v for k, v in seen.items() if k != "own") == 2, seen
    assert seen["own"] >= 2, seen  # the probe's lines were read from the journal, and left out
    rc, out = cli("status", "--unit-name", UNIT, "--json")
    tr = json.loads(out)["traffic"]
    assert tr["total"] == 2 and tr["counts"]["tool_call_id"] == 2 and not tr["error"], tr
    rc, text = cli("status", "--unit-name", UNIT)
    assert "parse failures 2 (tool_call_id 2)" in text, text

    # broken: the simulator replaced by a server that returns raw tool-call tokens
    sandbox.run(["systemctl", "stop", UNIT])
    with ContractServer("no-tool-parser", port=port, served_model="kimi-k2.5", api_key=KEY):
        _wait("the metric to drop to 0", lambda: ok() == 0)
        _wait(
            "the alert hook to run",
            lambda: (
                "contract check kimi-mon-test-verify.service failed"
                in sandbox.run(
                    ["journalctl", "--no-pager", "-o", "cat", "-u", f"kimi-serve-alert@{VERIFY}.service"]
                ).stdout
            ),
        )
        alert = sandbox.run(["systemctl", "show", f"kimi-serve-alert@{VERIFY}.service", "-p", "DynamicUser"])
        assert alert.stdout.strip() == "DynamicUser=yes", alert.stdout
        rc, out = cli("status", "--unit-name", UNIT, "--json")
        st = json.loads(out)["monitor"]
        assert st["broken_since"] is not None and st["broken_for_s"] >= 0 and st["contract_held_last"], st
        assert st["last"][-1]["status"] in ("fail", "unreachable")

    # a correct but slow server: every check takes longer than the interval, and none overlaps another
    slow_since = time.time()
    with ContractServer("correct", port=port, served_model="kimi-k2.5", delay=INTERVAL * 1.6, api_key=KEY) as slow:
        _wait("a slow check to pass", lambda: ok() == 1)
        runs_before = len(history())
        time.sleep(INTERVAL * 4)
        slow_runs = [r for r in history() if r["status"] == "pass" and r["started"] >= slow_since]
    assert len(history()) - runs_before <= 4, "more checks than the slow server allows one at a time"
    assert len(slow_runs) >= 2 and all(r["elapsed_s"] > INTERVAL for r in slow_runs), slow_runs
    assert all(a["finished"] <= b["started"] for a, b in zip(slow_runs, slow_runs[1:], strict=False)), slow_runs
    assert slow.requests
    journal = sandbox.run(["journalctl", "--no-pager", "-o", "cat", "-u", VERIFY]).stdout
    assert "skipped:" not in journal  # systemd itself never started a second run while one was going

    # fixed: the simulator back
    assert sandbox.run(["systemctl", "start", UNIT], timeout=300).returncode == 0
    _wait("the metric to come back to 1", lambda: ok() == 1)
    statuses = [r["status"] for r in history()]
    assert statuses[-1] == "pass" and {"fail", "unreachable"} & set(statuses), statuses
    rc, out = cli("status", "--unit-name", UNIT, "--json")
    st = json.loads(out)
    assert st["monitor"]["broken_since"] is None and st["timer"]["ActiveState"] == "active"
    rc, text = cli("status", "--unit-name", UNIT)
    assert "contract:     holds" in text and "check:" in text

    rc, out = cli("uninstall-service", "--unit-name", UNIT)
    assert rc == 0, out
    for name in (TIMER, VERIFY, "kimi-serve-alert@.service"):
        assert sandbox.run(["test", "-e", f"/etc/systemd/system/{name}"]).returncode == 1, name
    assert systemctl("is-active", TIMER) != "active"
