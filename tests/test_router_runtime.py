"""`up --profile sim-dp2` with SGLang's real router (sglang-router 0.3.2 from the CPU engine venv) in front of two
simulator replicas: the contract on each replica and through the router, the key shim (the key is nowhere on a
command line; the router enforces it), `verify --profile` through the router and per replica, a killed replica (the
router keeps serving; verify names the dead one) and the stop order (router first)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from up_helpers import UpProcess, dp2_profile, live_group

from kimi_serve.router.client import router_health, worker_ids
from kimi_serve.service.gates import wait_router

KEY, ADMIN = "router-test-key-5f2c", "router-admin-key-8e41"


def _pid(output: str, pattern: str) -> int:
    m = re.search(pattern, output)
    assert m, f"{pattern!r} not in:\n{output[-3000:]}"
    return int(m.group(1))


def _chat(router_port: int, api_key: str) -> Any:
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{router_port}/v1", api_key=api_key, max_retries=0, timeout=60)
    return client.chat.completions.create(
        model="kimi-k2.5", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )


def _manage(router_port: int, method: str, path: str, key: str, body: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{router_port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _status_without_key(router_port: int) -> int:
    body = json.dumps({"model": "kimi-k2.5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(
        f"http://127.0.0.1:{router_port}/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_up_sim_dp2_serves_through_the_real_router(tmp_path: Path, sglang_python: str, cli: Callable[..., Any]) -> None:
    import openai

    key_file = tmp_path / "key.yaml"
    key_file.write_text(f"api-key: {KEY}\nadmin-api-key: {ADMIN}\n")
    key_file.chmod(0o600)
    profile, base, router_port = dp2_profile(tmp_path, key_file)
    up = UpProcess(["--profile", str(profile), "--log-file", str(tmp_path / "up.log"), "-q"], tmp_path / "state")
    pids: list[int] = []
    seen, router_ready = 0.0, ""
    try:
        assert up.wait_for("supervising 2 replicas", 420), up.output[-5000:]
        out = up.output
        for tag in ("replica0", "replica1", "router"):
            assert f"{tag}: verify: contract holds" in out, out[-5000:]
        router_ready = re.search(r"router ready in [0-9.]+s", out).group(0)  # type: ignore[union-attr]
        pids = [
            _pid(out, r"replica0: server pid (\d+)"),
            _pid(out, r"replica1: server pid (\d+)"),
            _pid(out, r"router: pid (\d+) \(own session"),
        ]
        router_pid = pids[2]
        assert "-m kimi_serve.router.shim --api-key-file" in out and KEY not in out
        for pid in pids:  # the keys are on no command line and in no environment of the deployment
            for secret in (KEY, ADMIN):
                assert secret not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                assert secret not in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        for log in (tmp_path / "up-router.log", tmp_path / "up-replica0.log", tmp_path / "up-replica1.log"):
            assert log.is_file() and log.stat().st_size > 0, log

        # the router enforces the key (the shim handed it over), with the official openai client
        with pytest.raises(openai.AuthenticationError):
            _chat(router_port, "wrong-key")
        assert _status_without_key(router_port) == 401
        assert _chat(router_port, KEY).choices[0].message is not None
        view = router_health(f"http://127.0.0.1:{router_port}", ADMIN)  # /workers: the admin key only
        assert view.healthy == view.total == 2 and view.listed, view
        # what a rolling restart asks first: another healthy worker than the one it is about to stop
        assert wait_router(
            f"127.0.0.1:{router_port}", ADMIN, minimum=1, wait=0, exclude=f"http://127.0.0.1:{base + 1}"
        )[0]
        assert not router_health(f"http://127.0.0.1:{router_port}", KEY).listed

        # the router's worker management: the clients' key is refused; a worker added with the admin key (behind
        # up's back) makes up say the deployment is degraded, naming it; removing it again, that it is whole again
        extra = f"http://localhost:{base}"
        assert _manage(router_port, "POST", "/workers", KEY, {"url": extra}) == 401
        assert _manage(router_port, "POST", "/workers", ADMIN, {"url": extra}) == 202
        assert up.wait_for(
            f"router: DEGRADED: the router's workers are not the profile's replicas (unexpected: {extra})", 30
        ), up.output[-3000:]
        ids = worker_ids(f"127.0.0.1:{router_port}", ADMIN)
        assert isinstance(ids, dict) and extra in ids, ids
        assert _manage(router_port, "DELETE", f"/workers/{ids[extra]}", KEY) == 401
        assert _manage(router_port, "DELETE", f"/workers/{ids[extra]}", ADMIN) in (200, 202, 204)
        assert up.wait_for("router: the router's workers are the profile's replicas again", 30), up.output[-3000:]

        ok = cli("verify", "--profile", str(profile), "--json")
        doc = json.loads(ok.out)
        assert ok.code == 0, ok.out
        assert doc["router"]["status"] == "pass" and doc["target"] == f"http://127.0.0.1:{router_port}"
        assert [(r["name"], r["status"]) for r in doc["replicas"]] == [("replica 0", "pass"), ("replica 1", "pass")]

        # kill replica 1: the router sees it, keeps serving, and verify names the dead replica
        killed = time.monotonic()
        os.killpg(pids[1], signal.SIGKILL)
        while time.monotonic() - killed < 90:
            view = router_health(f"http://127.0.0.1:{router_port}", ADMIN)
            if view.healthy == 1:
                break
            time.sleep(0.2)
        seen = time.monotonic() - killed
        assert view.healthy == 1 and view.total == 2, view
        dead = view.worker(f"http://127.0.0.1:{base + 1}")
        assert dead is not None and not dead.healthy, view
        assert up.wait_for("replica 1 (127.0.0.1:", 30) and up.wait_for("the router keeps serving", 30), up.output
        assert up.wait_for(f"router: replica 1 (127.0.0.1:{base + 1}) marked unhealthy", 30), up.output[-3000:]
        for _ in range(4):
            assert _chat(router_port, KEY).choices
        bad = cli("verify", "--profile", str(profile), "--json")
        assert bad.code == 3, bad.out
        doc = json.loads(bad.out)
        assert doc["router"]["status"] == "pass"
        assert [(r["name"], r["status"]) for r in doc["replicas"]] == [
            ("replica 0", "pass"),
            ("replica 1", "unreachable"),
        ]
        assert doc["router"]["health"]["healthy_workers"] == 1
        text = cli("verify", "--profile", str(profile))
        assert text.code == 3
        assert f"replica 1 (http://127.0.0.1:{base + 1}) unreachable" in text.out

        # Ctrl-C: the router stops first, then the surviving replica; degraded deployment -> exit 4 (docs/up.md)
        up.proc.send_signal(signal.SIGINT)
        assert up.finish(120) == 4, up.output[-3000:]
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
            up.finish(30)
        for pid in pids:
            for member in live_group(pid):
                os.kill(member, signal.SIGKILL)
    out = up.output
    stop_router = out.index("SIGINT received; stopping the router first")
    router_ended = out.index(f"router: pid {router_pid} ended: exit status 0")  # SIGTERM stops the shim cleanly
    assert stop_router < router_ended < out.index("replica0: SIGINT received; stopping the server")
    assert "had exited during the run" in out and "replica 1 (127.0.0.1:" in out
    assert all(live_group(pid) == [] for pid in pids)
    print(
        f"\nrouter ready {router_ready}; killed replica unhealthy in the router after {seen:.1f}s "
        "(sim-dp2: health_check_interval 2 s x health_failure_threshold 2)"
    )


def test_a_replica_that_never_gets_ready_stops_the_deployment_and_is_named(tmp_path: Path, sglang_python: str) -> None:
    """Both replicas load for 600 s (the simulator's KIMI_SERVE_SIM_LOAD_SECONDS) against startup.timeout 10 s: `up`
    names the replica, exits 3, never starts the router, leaves no process behind."""
    profile, base, _ = dp2_profile(tmp_path, None)
    profile.write_text(profile.read_text() + "startup: {timeout: 10}\nenv: {KIMI_SERVE_SIM_LOAD_SECONDS: '600'}\n")
    up = UpProcess(["--profile", str(profile), "--log-file", str(tmp_path / "up.log"), "-q"], tmp_path / "state")
    try:
        code = up.finish(180)
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
    out = up.output
    assert code == 3, out[-3000:]
    assert re.search(
        rf"kimi-serve: error: logs .*up-\*\.log: replica [01] \(127\.0\.0\.1:(?:{base}|{base + 1})\): the server "
        r"was not ready within 10s \(phase: launch\)",
        out,
    ), out[-3000:]
    assert "starting the router" not in out
    for pattern in (r"replica0: server pid (\d+)", r"replica1: server pid (\d+)"):
        assert live_group(_pid(out, pattern)) == []
