"""`render` of a topology: one rank's launch (`--node-rank`), the router's and every replica's launch, and the JSON
document (docs/json.md); errors are one line with exit 2."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.test_profile import assert_one_line_error


@pytest.fixture(autouse=True)
def _pinned_interpreter(monkeypatch):
    monkeypatch.setenv("KIMI_SERVE_SGLANG_PYTHON", "/opt/sglang/bin/python")


def _doc(cli, *args):
    res = cli("render", *args, "--json")
    assert res.code == 0, res.err
    return json.loads(res.out)


def _value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_ranks_differ_only_in_node_rank(cli):
    r0, r1 = _doc(cli, "-p", "prod-tp16", "--node-rank", "0"), _doc(cli, "-p", "prod-tp16", "--node-rank", "1")
    a0, a1 = r0["argv"], r1["argv"]
    assert len(a0) == len(a1)
    diff = [i for i, (x, y) in enumerate(zip(a0, a1, strict=True)) if x != y]
    assert len(diff) == 1 and a0[diff[0] - 1] == "--node-rank" and (a0[diff[0]], a1[diff[0]]) == ("0", "1")
    assert r0["env"] == r1["env"]
    assert (_value(a0, "--nnodes"), _value(a0, "--dist-init-addr"), _value(a0, "--tp-size")) == (
        "2",
        "192.0.2.10:20000",
        "16",
    )
    assert r0["node"] == {"rank": 0, "count": 2, "leader": "192.0.2.10:20000", "serves_api": True}
    assert r1["node"]["serves_api"] is False and r1["node"]["rank"] == 1
    assert "launches" not in r0  # one server, no router


def test_node_rank_default_is_the_profiles_rank(cli):
    assert _doc(cli, "-p", "prod-tp16")["argv"] == _doc(cli, "-p", "prod-tp16", "--node-rank", "0")["argv"]
    assert (
        _doc(cli, "-p", "prod-tp16", "--set", "nodes.rank=1")["argv"]
        == _doc(cli, "-p", "prod-tp16", "--node-rank", "1")["argv"]
    )


def test_human_render_of_one_rank_is_one_pasteable_line(cli):
    res = cli("render", "-p", "prod-tp16", "--node-rank", "1")
    assert res.code == 0 and len(res.out.splitlines()) == 1
    words = shlex.split(res.out)
    assert _value(words, "--node-rank") == "1"


@pytest.mark.parametrize(
    "args, needles",
    [
        (["-p", "prod", "--node-rank", "1"], ["--node-rank 1", "single-node (nodes.count 1)", "drop --node-rank"]),
        (
            ["-p", "prod-tp16", "--node-rank", "2"],
            ["--node-rank 2", "nodes.count is 2", "ranks are 0..1", "pass --node-rank 0..1"],
        ),
        (["-p", "prod-tp16", "--node-rank", "-1"], ["--node-rank"]),
        (["-p", "prod-tp16", "--node-rank", "one"], ["--node-rank"]),
    ],
)
def test_node_rank_errors_are_one_line_exit_2(cli, args, needles):
    assert_one_line_error(cli("render", *args), *needles)


def test_node_rank_error_with_json_is_the_envelope(cli):
    res = cli("render", "-p", "prod-tp16", "--node-rank", "5", "--json")
    assert res.code == 2
    doc = json.loads(res.out)
    assert doc["kind"] == "kimi-serve-render" and doc["ok"] is False and doc["exit_code"] == 2
    assert "nodes.count is 2" in doc["findings"][0]["message"]


def test_local_replicas_render_the_router_and_each_replica(cli):
    doc = _doc(cli, "-p", "sim-dp2")
    launches = doc["launches"]
    assert [(x["name"], x["role"], x["endpoint"], x["local"]) for x in launches] == [
        ("router", "router", "127.0.0.1:30000", True),
        ("replica 0", "replica", "127.0.0.1:30010", True),
        ("replica 1", "replica", "127.0.0.1:30011", True),
    ]
    router = launches[0]["argv"]
    assert router[1:5] == ["-P", "-m", "kimi_serve.router.shim", "--"]
    urls = router[router.index("--worker-urls") + 1 : router.index("--policy")]
    assert urls == ["http://127.0.0.1:30010", "http://127.0.0.1:30011"]
    assert (_value(router, "--prometheus-host"), _value(router, "--health-check-interval-secs")) == ("127.0.0.1", "2")
    r0, r1 = launches[1]["argv"], launches[2]["argv"]
    assert (_value(r0, "--port"), _value(r1, "--port")) == ("30010", "30011")
    # the replicas differ only in their port; the top-level argv stays the server launch (replica 0)
    assert [x for x in r0 if x != "30010"] == [x for x in r1 if x != "30011"]
    assert doc["argv"] == r0 and doc["env"] == launches[1]["env"]


def test_human_render_names_each_launch(cli):
    res = cli("render", "-p", "sim-dp2")
    assert res.code == 0
    lines = res.out.splitlines()
    assert lines[0] == "# router on 127.0.0.1:30000 -> 127.0.0.1:30010, 127.0.0.1:30011"
    assert lines[2] == "# replica 0 on 127.0.0.1:30010 (this host)" and lines[4].startswith("# replica 1 on ")
    assert "-m kimi_serve.router.shim -- --worker-urls" in lines[1] and "--port 30011" in lines[5]


def test_remote_replicas_and_the_key_through_the_shim(cli):
    doc = _doc(cli, "-p", "prod-dp2")
    router, *reps = doc["launches"]
    argv = router["argv"]
    assert argv[1:6] == ["-P", "-m", "kimi_serve.router.shim", "--api-key-file", "/etc/kimi-serve/prod-secrets.yaml"]
    assert "--api-key" not in argv and _value(argv, "--port") == "31000" and _value(argv, "--host") == "0.0.0.0"
    assert [(r["endpoint"], r["local"]) for r in reps] == [("192.0.2.11:30000", False), ("192.0.2.12:30000", False)]
    assert all(r["argv"][1:4] == ["-P", "-m", "sglang.launch_server"] for r in reps)


def test_multinode_replicas_rendezvous_at_their_own_rank0(write_profile, cli):
    path = write_profile(
        "extends: prod-tp16\nreplicas: 2\nnodes:\n  leader_host: 10.0.0.7\n"
        "router:\n  port: 31000\n  workers: ['10.0.0.7:30000', '10.0.0.8:30000']\n"
    )
    _, r0, r1 = _doc(cli, "-p", str(path), "--node-rank", "1")["launches"]
    assert _value(r0["argv"], "--dist-init-addr") == "10.0.0.7:20000"
    assert _value(r1["argv"], "--dist-init-addr") == "10.0.0.8:20000"
    assert _value(r0["argv"], "--node-rank") == _value(r1["argv"], "--node-rank") == "1"
