"""The deployment's shape as data: replica addresses, multi-node flags and the router's launch (pure functions)."""

from __future__ import annotations

import pytest

from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.profile.router import ROUTER_SHIM_MODULE, build_router_launch
from kimi_serve.profile.topology import parse_worker, replicas, routed


def test_single_server_is_one_local_replica_without_router():
    p = load_profile("prod")
    assert [(r.index, r.host, r.port, r.local) for r in replicas(p)] == [(0, "0.0.0.0", 30000, True)]
    assert not routed(p)
    assert "--nnodes" not in build_launch(p, "py").server_args


def test_local_replicas_listen_at_consecutive_ports_and_the_router_lists_them_in_order():
    p = load_profile("sim-dp2")
    assert routed(p)
    reps = replicas(p)
    assert [r.url for r in reps] == ["http://127.0.0.1:30010", "http://127.0.0.1:30011"]
    for r in reps:
        launch = build_launch(p, "py", port=r.port)
        args = list(launch.server_args)
        assert args[args.index("--port") + 1] == str(r.port) and launch.port == r.port
    router = build_router_launch(p, "py")
    assert router.argv[:5] == ("py", "-P", "-m", ROUTER_SHIM_MODULE, "--")  # the shim even without a key: a 1 s start
    args = list(router.server_args)
    assert args[args.index("--worker-urls") + 1 : args.index("--worker-urls") + 3] == [r.url for r in reps]
    assert args[args.index("--port") + 1] == "30000"
    # never the router's defaults: Prometheus on every interface, 60 s x 3 health checks
    assert args[args.index("--prometheus-host") + 1] == "127.0.0.1"
    assert args[args.index("--health-check-interval-secs") + 1] == "2"


def test_remote_workers_come_from_router_workers_and_ipv6_is_bracketed():
    p = load_profile("prod", ["replicas=2", 'router.workers=["10.0.0.1:30000", "[fd00::2]:30001"]'])
    assert [(r.host, r.port, r.local) for r in replicas(p)] == [("10.0.0.1", 30000, False), ("fd00::2", 30001, False)]
    assert [r.url for r in replicas(p)] == ["http://10.0.0.1:30000", "http://[fd00::2]:30001"]


@pytest.mark.parametrize(
    "addr, parsed",
    [
        ("h:1", ("h", 1)),
        ("http://h:80", ("h", 80)),
        ("[::1]:9", ("::1", 9)),
        ("h", None),
        ("h:0", None),
        ("h:70000", None),
        (":80", None),
        ("[::1]", None),
    ],
)
def test_parse_worker(addr, parsed):
    assert parse_worker(addr) == parsed


def test_a_key_file_routes_the_router_through_the_shim_and_never_puts_the_key_on_argv():
    p = load_profile("prod", ["replicas=2", 'router.workers=["10.0.0.1:30000", "10.0.0.2:30000"]'])
    launch = build_router_launch(p, "/opt/venv/bin/python", "/opt/kimi")
    assert launch.argv[:6] == (
        "/opt/venv/bin/python",
        "-P",
        "-m",
        ROUTER_SHIM_MODULE,
        "--api-key-file",
        "/etc/kimi-serve/prod-secrets.yaml",
    )
    assert "--api-key" not in launch.argv and launch.argv[6] == "--"
    assert launch.env["PYTHONPATH"].split(":")[0] == "/opt/kimi"


def test_multi_node_flags_per_rank():
    sets = ["nodes.count=2", "nodes.leader_host=10.0.0.1", "parallel.tp_size=16"]
    for rank in (0, 1):
        args = list(build_launch(load_profile("prod", [*sets, f"nodes.rank={rank}"]), "py").server_args)
        i = args.index("--nnodes")
        assert args[i : i + 6] == ["--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", "10.0.0.1:20000"]
    v6 = build_launch(load_profile("prod", ["nodes.count=2", "nodes.leader_host=fd00::1"]), "py").server_args
    assert "[fd00::1]:20000" in v6
