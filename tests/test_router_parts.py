"""The router pieces that need no running router: the key shim's argument and key-file handling (run as a real
subprocess), the deployment verdict of `verify --profile`, the replicated `up --dry-run`, and its usage errors."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import Finding
from kimi_serve.host.doctor import port_problem
from kimi_serve.profile.member import Member, Role
from kimi_serve.router.shim import router_flags, split_argv
from kimi_serve.verify.members import DeploymentReport, MemberReport, render_deployment
from kimi_serve.verify.render import render_lines
from kimi_serve.verify.report import ProbeResult, Readiness, VerifyReport, problem

REPO = Path(__file__).resolve().parent.parent


def _key_file(tmp_path: Path, text: str = "api-key: k-123\nadmin-api-key: adm-456\n", mode: int = 0o600) -> Path:
    path = tmp_path / "key.yaml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_shim_appends_the_keys_from_the_file(tmp_path: Path) -> None:
    """The clients' key as --api-key, the admin key as the router's only control-plane key (sglang-router 0.3.2
    then refuses the clients' key on /workers: tests/test_router_control_plane.py)."""
    key = _key_file(tmp_path)
    assert router_flags(["--api-key-file", str(key), "--", "--port", "1"]) == [
        "--port",
        "1",
        "--api-key",
        "k-123",
        "--control-plane-api-keys",
        "kimi-serve:kimi-serve:admin:adm-456",
    ]
    assert split_argv(["--api-key-file", str(key), "--"]) == (key, [])
    assert router_flags(["--", "--port", "1"]) == ["--port", "1"]  # no key file: no key


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--api-key-file", "k.yaml", "--port", "1"], "missing `--`"),
        (["--api-key-file", "--", "--port", "1"], "unexpected arguments --api-key-file"),
        (["--key", "k.yaml", "--", "--port", "1"], "unexpected arguments --key k.yaml"),
        (["--api-key-file", "k.yaml", "--", "--api-key", "x"], "--api-key among the router's flags"),
        (["--api-key-file", "k.yaml", "--", "--api-key=x"], "--api-key among the router's flags"),
        (["--", "--control-plane-api-keys", "a:b:admin:x"], "--control-plane-api-keys among the router's flags"),
    ],
)
def test_shim_refuses_bad_arguments(argv: list[str], says: str) -> None:
    with pytest.raises(KimiServeError) as err:
        split_argv(argv)
    assert says in err.value.message


def _shim(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "kimi_serve.router.shim", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_shim_process_errors_are_one_line(tmp_path: Path) -> None:
    missing = _shim("--api-key-file", str(tmp_path / "none.yaml"), "--", "--port", "1")
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        f"kimi-serve: error: router shim --api-key-file {tmp_path / 'none.yaml'}: API key file not found "
        "(fix: pass the file SGLang reads via --config)"
    ]
    open_file = _shim("--api-key-file", str(_key_file(tmp_path, mode=0o644)), "--")
    assert open_file.returncode == 2 and "accessible by group/others" in open_file.stderr
    assert "Traceback" not in open_file.stderr + missing.stderr


@pytest.mark.parametrize("text", ["api-key: k-123\n", "api-key: k-123\nadmin-api-key: k-123\n", "k-123\n"])
def test_shim_refuses_a_key_file_without_a_distinct_admin_key(tmp_path: Path, text: str) -> None:
    """Without one the router's worker management (/workers) would take the clients' key: exit 2, one line naming
    the file and the fix, no key shown, the router never started."""
    path = _key_file(tmp_path, text)
    res = _shim("--api-key-file", str(path), "--", "--port", "1")
    assert res.returncode == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"kimi-serve: error: router shim --api-key-file {path}: no admin-api-key distinct")
    assert f"(fix: add a line 'admin-api-key: OTHER-KEY' to {path}" in line and "k-123" not in line


def test_shim_without_sglang_router_says_so(tmp_path: Path) -> None:
    """kimi-serve's own interpreter has no sglang_router (the engine interpreter has): exit 5, the key not shown."""
    pytest.importorskip("yaml")
    try:
        import sglang_router  # noqa: F401

        pytest.skip("sglang_router is importable here")
    except ImportError:
        pass
    res = _shim("--api-key-file", str(_key_file(tmp_path)), "--", "--port", "1")
    assert res.returncode == 5 and "cannot import sglang_router" in res.stderr and "k-123" not in res.stderr


def _report(target: str, *, fail: str | None = None, unreachable: bool = False) -> VerifyReport:
    r = VerifyReport(target=target, suite="quick", readiness=Readiness(not unreachable, "ready", 0.1))
    if unreachable:
        r.error, r.error_unreachable = problem("not_ready", "server not ready after 0.0s: refused", "start it"), True
        return r
    findings: tuple[Finding, ...] = (problem(fail, f"{fail} went wrong", "fix it"),) if fail else ()
    r.probes = [ProbeResult("tool", "stream", 0.2, findings)]
    return r


def test_deployment_verdict_names_the_replica_that_breaks_the_contract() -> None:
    parts = [
        MemberReport(Member(Role.ROUTER, 0, "r:1", True), _report("http://r:1")),
        MemberReport(Member(Role.REPLICA, 0, "a:2", True), _report("http://a:2")),
        MemberReport(Member(Role.REPLICA, 1, "b:3", True), _report("http://b:3", unreachable=True)),
    ]
    dead = DeploymentReport(parts)
    assert dead.exit_code == 3 and [p.member.label for p in dead.broken] == ["replica 1"]
    doc = dead.to_dict()
    assert (doc["exit_code"], doc["ok"], doc["status"], doc["target"]) == (3, False, "unreachable", "http://r:1")
    assert [(r["name"], r["status"]) for r in doc["replicas"]] == [("replica 0", "pass"), ("replica 1", "unreachable")]
    assert doc["findings"][0]["message"].startswith("replica 1: server not ready")
    text = render_deployment(dead, render_lines)
    assert text.splitlines()[-1].startswith(
        "verify: deployment unreachable in part: replica 1 (http://b:3) unreachable: server not ready"
    )
    broken = DeploymentReport(
        [
            parts[0],
            MemberReport(Member(Role.REPLICA, 0, "a:2", True), _report("http://a:2", fail="no_tool_call")),
            parts[2],
        ]
    )
    assert broken.exit_code == 1  # a violation outranks an unreachable part
    assert "replica 0 (http://a:2) fail: tool stream: no_tool_call went wrong" in broken.summary()
    fine = DeploymentReport(
        parts[:2],
        router_view={
            "reachable": True,
            "healthy_workers": 1,
            "total_workers": 1,
            "workers": [{"url": "http://a:2", "healthy": True}],
        },
    )
    assert fine.exit_code == 0 and fine.to_dict()["router"]["health"]["healthy_workers"] == 1
    assert "router health: 1/1 workers healthy" in render_deployment(fine, render_lines)


class Ports(NamedTuple):
    replica: int  # replica 0; replica 1 takes the next one
    router: int
    metrics: int


@pytest.fixture
def ports(loopback_port: Callable[[], int]) -> Ports:
    return free_ports()


def free_ports() -> Ports:
    """Ports for the dp2 profile that nothing on this machine holds: below the kernel's ephemeral range (a fixed port
    inside it, 41710 once, was taken by some other test's client connection in CI, and preflight rightly refused it),
    each checked by binding it as preflight does."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    while True:
        base = rng.randrange(20000, min(low, 32768) - 100, 10)
        wanted = [base, base + 1, base + 5, base + 6, base + 9]
        if all(port_problem("127.0.0.1", port) is None for port in wanted):
            return Ports(base, base + 5, base + 9)


def dp2(directory: Path, ports: Ports, router_extra: str = "") -> Path:
    path = directory / "dp2.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        extends: sim-dp2
        server: {{port: {ports.replica}}}
        router: {{port: {ports.router}, metrics_port: {ports.metrics}{router_extra}}}
        """)
    )
    return path


def test_dry_run_prints_every_replica_and_the_router(
    cli: Callable[..., Any], tmp_path: Path, sglang_python: str, ports: Ports
) -> None:
    r0, r1 = ports.replica, ports.replica + 1
    res = cli("up", "--profile", str(dp2(tmp_path, ports)), "--dry-run", "--log-file", str(tmp_path / "u.log"))
    assert res.code == 0, res.err
    assert f"dry run: would start replica 0 (127.0.0.1:{r0})" in res.out
    assert f"dry run: would start replica 1 (127.0.0.1:{r1})" in res.out and f"--port {r1}" in res.out
    assert f"dry run: would start router (127.0.0.1:{ports.router}) (log: {tmp_path / 'u-router.log'})" in res.out
    assert f"-m kimi_serve.router.shim -- --worker-urls http://127.0.0.1:{r0} http://127.0.0.1:{r1}" in res.out
    assert "starting" not in res.out and not list(tmp_path.glob("u-*.log"))


def test_remote_workers_are_not_started_by_up(
    cli: Callable[..., Any], tmp_path: Path, sglang_python: str, ports: Ports
) -> None:
    res = cli("up", "--profile", str(dp2(tmp_path, ports, ", workers: [10.0.0.5:30000, 10.0.0.6:30000]")), "--dry-run")
    assert res.code == 2 and "router.workers names other hosts" in res.err


def test_verify_profile_with_monitoring_needs_host(cli: Callable[..., Any], tmp_path: Path, ports: Ports) -> None:
    res = cli("verify", "--profile", str(dp2(tmp_path, ports)), "--metrics-file", str(tmp_path / "m.prom"))
    assert res.code == 2 and "pass --host HOST:PORT too" in res.err


def test_verify_profile_of_a_stopped_deployment_is_unreachable(
    cli: Callable[..., Any], tmp_path: Path, ports: Ports
) -> None:
    res = cli("verify", "--profile", str(dp2(tmp_path, ports)), "--json")
    import json

    doc = json.loads(res.out)
    assert res.code == 3 and doc["router"]["health"]["reachable"] is False
    assert [r["status"] for r in doc["replicas"]] == ["unreachable", "unreachable"]


def test_verify_profile_of_one_replica_is_the_plain_report(
    cli: Callable[..., Any], write_profile: Callable[..., Path], ports: Ports
) -> None:
    import json

    port = ports.replica
    path = write_profile(f"extends: sim\nserver: {{port: {port}}}\n")
    res = cli("verify", "--profile", str(path), "--json")
    doc = json.loads(res.out)
    assert res.code == 3 and doc["target"] == f"http://127.0.0.1:{port}" and "replicas" not in doc


def test_router_port_clashing_with_a_replica_stops_up_before_anything_starts(
    cli: Callable[..., Any], tmp_path: Path, sglang_python: str, ports: Ports
) -> None:
    # in the profile itself: the deployment rule refuses it (exit 2, naming the key)
    profile = str(dp2(tmp_path, ports))
    res = cli(
        "up", "--profile", profile, "--set", f"router.port={ports.replica + 1}", "--log-file", str(tmp_path / "u.log")
    )
    assert res.code == 2, res.err
    assert "router.port" in res.err and "replica 1's port" in res.err
    assert "starting" not in res.out and not list(tmp_path.glob("u-*.log"))
    # on the host: something already listens on the router's port -> preflight, exit 5, nothing started
    import socket

    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", ports.router))
        busy.listen()
        res = cli("up", "--profile", profile, "--log-file", str(tmp_path / "u.log"))
    assert res.code == 5, res.err
    assert "preflight: port" in res.err and f"port {ports.router} " in res.err
    assert "starting" not in res.out and not list(tmp_path.glob("u-*.log"))


# ------------------------------------------------------------------- up's router readiness counts the replicas

R0, R1 = "http://127.0.0.1:30001", "http://127.0.0.1:30002"


def _one_of_two(listed: bool = True) -> Any:
    from kimi_serve.router.client import RouterHealth, Worker

    return RouterHealth(True, False, 1, 1, (Worker(R0, True),) if listed else (), "", listed)


def test_the_readiness_line_counts_the_expected_workers() -> None:
    """2 replicas, the router holds one (healthy): not "1/1 workers healthy; not ready", but 1 of the 2 expected."""
    line = _one_of_two().line([R0, R1])
    assert line.startswith("1/2 expected workers healthy") and f"not registered: {R1}" in line, line
    assert "not ready" in line and not _one_of_two().serves_all([R0, R1])
    assert "1/2 expected" in _one_of_two(listed=False).line([R0, R1])
    assert "(the router lists 1)" in _one_of_two(listed=False).line([R0, R1])
    from kimi_serve.router.client import RouterHealth, Worker

    both = RouterHealth(True, True, 2, 2, (Worker(R0, True), Worker(R1, True)), "", True)
    assert both.serves_all([R0, R1]) and both.line([R0, R1]) == "2/2 expected workers healthy"


def test_up_waits_for_every_replica_not_every_listed_worker() -> None:
    """The router lists 1 of 2 replicas, all healthy: `up` does not call it ready, and its
    timeout names 1/2."""
    from types import SimpleNamespace

    from kimi_serve.up.supervisor import Supervisor

    said: list[str] = []
    stops: list[Any] = []
    view = _one_of_two()
    me = SimpleNamespace(
        poller=SimpleNamespace(poll=lambda _now: view, expected=[R0, R1]),
        console=SimpleNamespace(end_progress=lambda: None, info=said.append),
        router_started=0.0,
        router_deadline=5.0,
        last_view=None,
        routing="router",
        logs={"router": "router.log"},
        _router_ready=lambda: said.append("READY"),
        begin_stop=lambda outcome, why: stops.append(outcome),
    )
    Supervisor._watch_router(me, 1.0)  # type: ignore[arg-type]
    assert "READY" not in said and not stops, said
    Supervisor._watch_router(me, 6.0)  # type: ignore[arg-type]
    assert stops and "1/2 expected workers healthy" in stops[0].message, stops
