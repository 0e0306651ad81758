"""install-service, restart, a failing restart that rolls back, status and uninstall against a REAL systemd (PID 1 in
a systemd-nspawn container), with the simulator engine (SGLang's own serving layer, scripted model) standing in for
the GPU server. The unit's ExecStartPost runs the real `kimi-serve verify`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from kimi_serve.check.launch import validated_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.unit import UnitContext

KEY = "sk-sandbox-7f3a%$x"
UNIT = "kimi-sbx-test.service"
SECRET = "/etc/kimi-serve/sbx-test-secrets.yaml"
HOSTILE = "50% $HOME ${X} \"q\" 'a' back\\slash ü 中文"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Stranger(BaseHTTPRequestHandler):
    """Another program holding the port the broken profile asks for: answers 404 to everything."""

    def do_GET(self) -> None:
        self.send_error(404)

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stranger_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stranger)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _main_argv(port: int) -> list[str] | None:
    """The argv of the process serving ``port``, read from /proc on the host (the container's PIDs are visible)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        args = [a.decode() for a in argv]
        if "kimi_serve.simulator" in args and str(port) in args:
            return args
    return None


def _environ_of(argv: list[str]) -> dict[str, str]:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]:
                raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                return dict(e.decode().split("=", 1) for e in raw if b"=" in e)
        except OSError:
            continue
    return {}


def _uid_of(root: str, user: str) -> int:
    line = next(x for x in Path(root, "etc/passwd").read_text().splitlines() if x.startswith(f"{user}:"))
    return int(line.split(":")[2])


def _status_of(argv: list[str]) -> dict[str, str]:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]:
                rows = Path(f"/proc/{pid}/status").read_text().splitlines()
                return dict(r.split(":\t", 1) for r in rows if ":\t" in r)
        except OSError:
            continue
    return {}


def _secret_in_any_cmdline() -> bool:
    needle = KEY.encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _served(port: int, key: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.get(f"http://127.0.0.1:{port}/v1/models", headers=headers, timeout=10)


def test_install_restart_rollback_uninstall(
    sandbox: Any, sglang_python: str, tmp_path: Path, stranger_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()
    profiles = tmp_path / "profiles"
    profiles.mkdir()

    def profile(name: str, body: str) -> Path:
        path = profiles / f"{name}.yaml"
        path.write_text(body)
        return path

    base = (
        f"extends: sim\nserver:\n  port: {port}\n  api_key_file: {SECRET}\nstartup:\n  timeout: 180\n"
        f"service:\n  unit_name: {UNIT.removesuffix('.service')}\n"
    )
    good = profile(
        "good",
        base + f"model:\n  served_name: {json.dumps(HOSTILE, ensure_ascii=False)}\n"
        f"env:\n  KIMI_TEST_VALUE: {json.dumps(HOSTILE, ensure_ascii=False)}\n",
    )
    good2 = profile("good2", base + "model:\n  served_name: kimi-k2.5-second\n")
    broken = profile("broken", f"extends: good2\nserver:\n  port: {stranger_port}\n")
    kimi = UnitContext.detect().kimi_serve
    # service.user (kimi-serve, prod's default) is created by install-service in the CONTAINER's user database, seen
    # from the host through /proc/LEADER/root (the host's /etc is never touched). CI keeps the interpreters under
    # /root (0700): let the service user traverse it, inside the container only (its overlay).
    container_root = f"/proc/{sandbox.leader}/root"
    env = {"KIMI_SERVE_SGLANG_PYTHON": sglang_python, "KIMI_SERVE_ACCOUNTS_ROOT": container_root}
    subprocess.run(["nsenter", "-t", str(sandbox.leader), "-m", "--", "chmod", "711", "/root"], check=True)

    def cli(*args: str, **extra_env: str) -> tuple[int, str, str]:
        done = sandbox.run([kimi, *args], env={**env, **extra_env})
        return done.returncode, done.stdout, done.stderr

    def systemctl(*args: str) -> str:
        return sandbox.run(["systemctl", *args]).stdout.strip()

    # 1. install-service --now: secret created from the environment, unit started, ExecStartPost verify passed
    rc, out, err = cli("install-service", "--profile", str(good), "--now", KIMI_SERVE_API_KEY=KEY)
    assert rc == 0, out + err
    assert systemctl("is-active", UNIT) == "active"
    assert systemctl("is-enabled", UNIT) == "enabled"
    # the running process has exactly the validated argv and environment, hostile characters included
    monkeypatch.setenv("KIMI_SERVE_SGLANG_PYTHON", sglang_python)
    launch = validated_launch(load_profile(str(good)))
    assert _main_argv(port) == list(launch.argv)
    assert _environ_of(list(launch.argv)).get("KIMI_TEST_VALUE") == HOSTILE
    # as the dedicated service user, under the strict sandbox (no new privileges, a seccomp filter, no capabilities)
    uid = _uid_of(container_root, "kimi-serve")
    status = _status_of(list(launch.argv))
    assert status["Uid"].split()[0] == str(uid) != "0", status
    assert (status["NoNewPrivs"], status["Seccomp"], status["CapEff"]) == ("1", "2", "0000000000000000"), status
    owner = sandbox.run(["stat", "-c", "%u", SECRET])
    assert owner.stdout.strip() == str(uid), owner.stderr  # it owns the key file
    assert _served(port, KEY).json()["data"][0]["id"] == HOSTILE
    # the key: in the 0600 file only; not in the unit, not on any command line, and required by the server
    unit_text = Path(f"/etc/systemd/system/{UNIT}")  # read through the sandbox: the host path is a scratch bind
    unit_body = sandbox.run(["cat", str(unit_text)]).stdout
    assert KEY not in unit_body and "KIMI_SERVE_API_KEY" not in unit_body
    assert sandbox.run(["stat", "-c", "%a", SECRET]).stdout.strip() == "600"
    assert not _secret_in_any_cmdline()
    assert _served(port, None).status_code == 401

    # 2. restart with a changed, valid profile: new unit live, recorded as the last good one
    rc, out, err = cli("restart", "--profile", str(good2))
    assert rc == 0, out + err
    assert _served(port, KEY).json()["data"][0]["id"] == "kimi-k2.5-second"
    good2_unit = sandbox.run(["cat", str(unit_text)]).stdout

    # 3. restart with a profile that passes check but cannot serve (its port is held by another program)
    rc, out, err = cli("restart", "--profile", str(broken), "--json")
    assert rc == 1, out + err
    report = json.loads(out)
    assert report["new"]["ok"] is False and report["new"]["profile"] == "broken"
    assert report["rollback"]["ok"] is True and report["rollback"]["profile"] == "good2"
    assert systemctl("is-active", UNIT) == "active"
    assert sandbox.run(["cat", str(unit_text)]).stdout == good2_unit
    assert _served(port, KEY).json()["data"][0]["id"] == "kimi-k2.5-second"

    # 4. status: live profile, last verify, health
    rc, out, err = cli("status", "--unit-name", UNIT, "--json")
    st = json.loads(out)
    assert rc == 0, out + err
    assert (st["profile"], st["health"], st["state"]["ActiveState"]) == ("good2", "ready", "active")
    assert st["last_verify"]["status"] == "pass" and st["last_good"]["profile"] == "good2"
    assert st["edited_since_install"] is False
    # the sockets the server's process tree listens on: the simulator is one process, on the API port only
    assert [(x["port"], x["loopback"]) for x in st["listeners"]] == [(port, True)], st["listeners"]
    assert st["listener_findings"][0]["status"] == "pass"

    # 5. uninstall: stopped, disabled, gone
    rc, out, err = cli("uninstall-service", "--unit-name", UNIT)
    assert rc == 0, out + err
    assert systemctl("is-active", UNIT) != "active"
    assert sandbox.run(["test", "-e", str(unit_text)]).returncode == 1
    with pytest.raises(requests.ConnectionError):
        _served(port, KEY)


def test_sandbox_is_a_real_systemd(sandbox: Any) -> None:
    assert sandbox.run(["systemctl", "is-system-running"]).stdout.strip() in ("running", "degraded")
    assert Path(f"/proc/{sandbox.leader}/comm").read_text().strip() == "systemd"
