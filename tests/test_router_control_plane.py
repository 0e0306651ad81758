"""Issue #29, item 1: the clients' key must not control SGLang's router. With the real sglang-router 0.3.2 in front of
one pooled simulator replica:

- started through kimi-serve's shim (key file with api-key AND admin-api-key): the clients' key is refused on the
  worker-management API (GET/POST /workers, DELETE /workers/ID: 401) and the worker set stays as it was, while it still
  serves chat; the admin key (and only it) drives kimi-serve's own rolling-restart client (take a worker out, put it
  back); the router's view names missing and unexpected workers; verify through it passes its admin check;
- started the old way (``--api-key`` alone): the clients' key adds a worker, and verify through it FAILS
  (``router_control_plane_open``) naming the fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_pool import PARSED, SimulatorPool

from kimi_serve.core.findings import FAIL, PASS
from kimi_serve.router.client import post_worker, router_health, worker_ids
from kimi_serve.service.gates import wait_router
from kimi_serve.service.rotation import Rotation, put_back, take_out
from kimi_serve.verify import run_verify

REPO = Path(__file__).resolve().parent.parent
# the keys, flags and step of tests/test_admin_key_sglang.py's keyed simulator: one pooled replica for both files
KEY, ADMIN, STEP = "client-key-1", "admin-key-2", "0.002"
FLAGS = PARSED
# the router's launcher without the shim's key handling: how kimi-serve started it before (--api-key only)
OLD_WAY = (
    "import sys; from sglang_router.router_args import RouterArgs; from kimi_serve.router.shim import launch; "
    "launch(RouterArgs, sys.argv[1:])"
)


def _call(url: str, method: str, key: str | None, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()


def _chat(base: str, key: str) -> int:
    body = {"model": "kimi-k2.5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    return _call(base + "/v1/chat/completions", "POST", key, body)[0]


@pytest.fixture
def start_router(
    sglang_python: str, loopback_port: Callable[[], int], tmp_path: Path
) -> Iterator[Callable[..., tuple[str, str]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(worker: str, *, old_way: bool = False) -> tuple[str, str]:
        port = loopback_port()
        flags = ["--worker-urls", worker, "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(port)]
        flags += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(loopback_port())]
        flags += ["--health-check-interval-secs", "2", "--health-failure-threshold", "2", "--log-level", "warn"]
        if old_way:
            argv = [sglang_python, "-c", OLD_WAY, *flags, "--api-key", KEY]
        else:
            key_file = tmp_path / "router-keys.yaml"
            key_file.write_text(f"api-key: {KEY}\nadmin-api-key: {ADMIN}\n")
            key_file.chmod(0o600)
            argv = [sglang_python, "-m", "kimi_serve.router.shim", "--api-key-file", str(key_file), "--", *flags]
        log = open(tmp_path / f"router-{port}.log", "wb")  # noqa: SIM115 - the router's, for its life
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        endpoint = f"127.0.0.1:{port}"
        ok, state = wait_router(endpoint, KEY if old_way else ADMIN, minimum=1, wait=90)
        assert ok, f"{state}\n{(tmp_path / f'router-{port}.log').read_text(errors='replace')[-3000:]}"
        return f"http://{endpoint}", endpoint

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_clients_key_cannot_manage_the_router_and_the_admin_key_drives_the_rolling_client(
    simulator_pool: SimulatorPool, start_router: Callable[..., tuple[str, str]]
) -> None:
    sim = simulator_pool.get(FLAGS, key=KEY, admin_key=ADMIN, step=STEP)
    base, endpoint = start_router(sim.base_url)
    port = sim.base_url.rsplit(":", 1)[1]
    attacker = f"http://localhost:{port}"  # another URL for a real server: the router would register it
    ids = worker_ids(endpoint, ADMIN)
    assert isinstance(ids, dict) and list(ids) == [sim.base_url], ids

    # the clients' key: every management call refused, nothing changed; inference still served
    assert _call(base + "/workers", "GET", KEY)[0] == 401
    assert _call(base + "/workers", "POST", KEY, {"url": attacker})[0] == 401
    assert _call(base + f"/workers/{ids[sim.base_url]}", "DELETE", KEY)[0] == 401
    assert _call(base + "/flush_cache", "POST", KEY)[0] == 401
    assert post_worker(endpoint, KEY, attacker) == f"POST /workers {attacker}: HTTP 401"  # the client, with that key
    time.sleep(1.0)  # an accepted addition is queued: give one the time it would take
    view = router_health(base, ADMIN)
    assert view.listed and view.membership([sim.base_url]) == ([], []), view
    assert _chat(base, KEY) == 200 and _chat(base, ADMIN) == 401  # the admin key is no client key either
    assert not router_health(base, KEY).listed  # kimi-serve's view needs the admin key too

    # the admin key: kimi-serve's rolling-restart client takes the worker out and puts it back
    rotation = Rotation(endpoint, ADMIN, None, wait=30)
    assert take_out(rotation, sim.base_url) == (None, False)
    gone = router_health(base, ADMIN)
    assert gone.membership([sim.base_url]) == ([sim.base_url], [])
    assert gone.membership_line([sim.base_url]) == (
        f"the router's workers are not the profile's replicas (missing: {sim.base_url})"
    )
    assert put_back(rotation, sim.base_url, pending=False) is None
    ok, state = wait_router(endpoint, ADMIN, minimum=1, wait=60, healthy=sim.base_url)
    assert ok, state
    assert _chat(base, KEY) == 200

    # an added worker shows up as unexpected (what `up` and `status` report as degraded)
    assert _call(base + "/workers", "POST", ADMIN, {"url": attacker})[0] == 202
    deadline = time.monotonic() + 30
    while router_health(base, ADMIN).membership([sim.base_url])[1] != [attacker] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "unexpected: " + attacker in router_health(base, ADMIN).membership_line([sim.base_url])

    # verify through the router: its management route refuses the clients' key
    report = run_verify(base, api_key=KEY, suite="quick", timeout=60)
    admin = next(c for c in report.checks if c.code in ("admin_auth", "router_control_plane_open"))
    assert (admin.code, admin.status) == ("admin_auth", PASS), report.to_json()
    assert "router's worker management refuses the clients' API key (GET /workers: HTTP 401)" in admin.message
    assert report.exit_code == 0, report.to_json()


def test_verify_fails_on_a_router_whose_control_plane_takes_the_clients_key(
    simulator_pool: SimulatorPool, start_router: Callable[..., tuple[str, str]], cli: Callable[..., Any]
) -> None:
    sim = simulator_pool.get(FLAGS, key=KEY, admin_key=ADMIN, step=STEP)
    base, endpoint = start_router(sim.base_url, old_way=True)
    port = sim.base_url.rsplit(":", 1)[1]
    # the finding: with --api-key alone, the clients' key manages the router
    assert _call(base + "/workers", "POST", KEY, {"url": f"http://localhost:{port}"})[0] == 202
    report = run_verify(base, api_key=KEY, suite="quick", timeout=60)
    assert all(p.passed for p in report.probes), report.to_json()
    opened = next(c for c in report.checks if c.code == "router_control_plane_open")
    assert opened.status == FAIL and "POST /workers" in opened.message and "admin-api-key" in opened.fix
    assert report.exit_code == 1
    shown = cli("verify", "--host", base, "--api-key", KEY, "--timeout", "60")
    assert shown.code == 1 and "router_control_plane_open" in shown.out and KEY not in shown.out
