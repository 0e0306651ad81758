"""Topology rules (nodes:, parallel.pp_size, replicas, router:): each has a failing profile whose `render` exits 2 with
one line naming the key and the fix; the warnings show in `check`; docs/scale-out.md explains every rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_profile import assert_one_line_error

REPO = Path(__file__).resolve().parent.parent
MULTI = (
    "nodes:\n  count: 2\n  leader_host: 10.0.0.1\nparallel:\n  tp_size: 16\n"
    "allreduce:\n  flashinfer_fusion_backend: null\n  torch_symm_mem: false\n  pcie_ipc: false\n"
)

BAD = [
    (
        "prod",
        "nodes:\n  count: 2\nparallel:\n  tp_size: 16\n",
        ["nodes.leader_host", "no --dist-init-addr", "SGLang's validation lets this pass", "rank-0 host"],
    ),
    (
        "prod",
        "nodes:\n  count: 2\n  leader_host: 127.0.0.1\nparallel:\n  tp_size: 16\n",
        ["nodes.leader_host", "loopback", "cannot reach"],
    ),
    ("prod-tp16", "nodes:\n  rank: 2\n", ["nodes.rank", "outside a group of nodes.count 2", "ranks 0..1"]),
    ("prod", "nodes:\n  rank: 1\n", ["nodes.rank", "set nodes.rank: 0"]),
    (
        "prod-tp16",
        "parallel:\n  tp_size: 8\n",
        ["parallel.tp_size", "gpus 8 x nodes.count 2 = 16 GPUs", "set parallel.tp_size: 16"],
    ),
    (
        "prod-tp16",
        "nodes:\n  count: 3\n",
        ["parallel.tp_size", "= 24 GPUs", "tp_size must be divisible by number of nodes", "divides the 64"],
    ),
    (
        "prod-tp16",
        "allreduce:\n  flashinfer_fusion_backend: trtllm\n",
        ["allreduce.flashinfer_fusion_backend", "single-node only", "model-runner init", "null"],
    ),
    (
        "prod-tp16",
        "parallel:\n  tp_size: 8\n  pp_size: 2\n",
        ["parallel.pp_size", "only supports EAGLE (non-multi-layer)", "speculative.enabled: false"],
    ),
    ("prod", "extra_args: ['--nnodes', '2']\n", ["extra_args", "--nnodes", "set nodes.count"]),
    ("prod", "extra_args: ['--pipeline-parallel-size', '2']\n", ["extra_args", "set parallel.pp_size"]),
    ("prod", "extra_args: ['--dist-init-addr=10.0.0.1:20000']\n", ["extra_args", "nodes.leader_host"]),
    (
        "prod",
        "replicas: 2\n",
        ["replicas", "need 16 GPUs on this host", "GPUs 0..7", "router.workers", "engine: simulator"],
    ),
    ("prod-dp2", "replicas: 3\n", ["router.workers", "lists 2 replica address(es), replicas is 3", "set replicas: 2"]),
    ("prod-dp2", "router:\n  workers: ['10.0.0.1:30000', 'nohost']\n", ["router.workers", "'nohost'", "HOST:PORT"]),
    ("prod-dp2", "router:\n  workers: ['10.0.0.1:30000', '10.0.0.1:30000']\n", ["router.workers", "twice"]),
    ("sim-dp2", "router:\n  port: 30011\n", ["router.port", "replica 1's port", "outside 30010..30011"]),
    ("sim-dp2", "router:\n  metrics_port: 30010\n", ["router.metrics_port", "replica 0's port"]),
    ("sim-dp2", "router:\n  metrics_port: 30000\n", ["router.metrics_port", "is router.port"]),
    ("sim-dp2", "server:\n  port: 65535\n", ["server.port", "replica 1 would listen at 65536"]),
    ("sim-dp2", "router:\n  host: 0.0.0.0\n", ["router.host", "without an API key", "server.api_key_file"]),
    ("prod-tp16", "replicas: 2\n", ["router.workers", "rank-0 address", "ranks >= 1 serve no API"]),
    (
        "prod-tp16",
        "replicas: 2\nrouter:\n  workers: ['10.0.0.7:30000', '10.0.0.8:30000']\n",
        ["nodes.leader_host", "is not one of router.workers", "rank 0"],
    ),
]


@pytest.fixture(autouse=True)
def _fast_layers_only(monkeypatch):
    """kimi-serve's own layers only: no SGLang probe (tests/test_multinode_sglang.py has it)."""
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)


@pytest.mark.parametrize("parent, body, needles", BAD, ids=[f"{p}:{b.splitlines()[0]}" for p, b, _ in BAD])
def test_topology_rule_rejects(write_profile, cli, parent, body, needles):
    path = write_profile(f"extends: {parent}\n" + body)
    assert_one_line_error(cli("render", "--profile", str(path)), *needles)


def _findings(cli, path_or_name, *extra):
    res = cli("check", "--profile", str(path_or_name), "--offline", "--json", *extra)
    return res.code, json.loads(res.out)["findings"]


def _by_code(findings, code):
    return [f for f in findings if f["code"] == code]


@pytest.mark.parametrize("name", ["prod-tp16", "prod-dp2", "sim-dp2"])
def test_shipped_topology_profiles_pass(cli, name):
    code, findings = _findings(cli, name)
    assert code == 0, [f for f in findings if f["status"] == "fail"]


def test_multinode_warnings_say_what_spanning_hosts_costs(cli):
    code, findings = _findings(cli, "prod-tp16")
    assert code == 0
    cost = _by_code(findings, "nodes.count")[0]
    assert cost["status"] == "warn" and "every layer's all-reduces on the network" in cost["message"]
    assert "prefer replicas" in cost["message"]
    ib = _by_code(findings, "env.NCCL_IB_DISABLE")[0]
    assert ib["status"] == "warn" and "TCP sockets" in ib["message"] and "InfiniBand" in ib["fix"]
    placeholder = _by_code(findings, "nodes.leader_host")[0]
    assert placeholder["status"] == "warn" and "documentation address" in placeholder["message"]
    assert "rank 0 of 2" in _by_code(findings, "nodes")[0]["message"]


def test_rank_one_is_told_it_serves_no_api(cli):
    _, findings = _findings(cli, "prod-tp16", "--set", "nodes.rank=1")
    assert "serves no API" in _by_code(findings, "nodes")[0]["message"]


def test_pipeline_cost_and_single_node_allreduce_paths_warn(write_profile, cli):
    pp = write_profile(
        "extends: prod-tp16\nparallel:\n  tp_size: 8\n  pp_size: 2\nspeculative:\n  enabled: false\n", name="pp"
    )
    code, findings = _findings(cli, pp)
    assert code == 0, findings
    assert "once per stage boundary" in _by_code(findings, "nodes.count")[0]["message"]
    assert _by_code(findings, "parallel.pp_size")[0]["status"] == "pass"
    assert "TP=8 x PP=2 on 8 GPUs x 2 nodes" in _by_code(findings, "parallel.tp_size")[0]["message"]
    # TP16 keeps prod's PCIe-IPC and torch symm mem on: both are inert for a 16-GPU TP group
    tp16 = write_profile(
        "extends: prod\n" + MULTI.replace("  torch_symm_mem: false\n  pcie_ipc: false\n", ""), name="tp16"
    )
    code, findings = _findings(cli, tp16)
    assert code == 0
    assert _by_code(findings, "allreduce.pcie_ipc")[0]["status"] == "warn"
    assert "every reduction stays on NCCL" in _by_code(findings, "allreduce.pcie_ipc")[0]["message"]
    assert _by_code(findings, "allreduce.torch_symm_mem")[0]["status"] == "warn"


def test_single_node_profiles_get_no_topology_warnings(cli):
    _, findings = _findings(cli, "prod")
    codes = {f["code"] for f in findings if f["status"] != "pass"}
    assert not codes & {
        "nodes.count",
        "env.NCCL_IB_DISABLE",
        "allreduce.pcie_ipc",
        "allreduce.torch_symm_mem",
        "router.workers",
        "nodes.leader_host",
    }, codes


def test_unauthenticated_router_allowed_explicitly_is_a_warning(write_profile, cli):
    path = write_profile("extends: sim-dp2\nallow_unauthenticated: true\nrouter:\n  host: 0.0.0.0\n")
    assert cli("render", "--profile", str(path)).code == 0
    _, findings = _findings(cli, path)
    warn = [f for f in _by_code(findings, "allow_unauthenticated") if "router" in f["message"]]
    assert warn and warn[0]["status"] == "warn"


def test_router_key_goes_through_the_shim(cli):
    _, findings = _findings(cli, "prod-dp2")
    assert "shim" in _by_code(findings, "router.host")[0]["message"]
    assert "placeholders" in _by_code(findings, "router.workers")[0]["message"]


def test_multinode_replicas_with_each_rank0_listed_pass(write_profile, cli):
    path = write_profile(
        "extends: prod-tp16\nreplicas: 2\nnodes:\n  leader_host: 10.0.0.7\n"
        "router:\n  port: 31000\n  workers: ['10.0.0.7:30000', '10.0.0.8:30000']\n"
    )
    code, findings = _findings(cli, path)
    assert code == 0, [f for f in findings if f["status"] == "fail"]
    assert "sends to each rank 0" in _by_code(findings, "replicas")[0]["message"]


# Every rule's key is explained in docs/scale-out.md.
DOC_KEYS = sorted(
    {n[0] for _, _, n in BAD}
    | {"nodes.count", "env.NCCL_IB_DISABLE", "allreduce.pcie_ipc", "allreduce.torch_symm_mem", "allow_unauthenticated"}
)


def test_scale_out_doc_explains_every_rule():
    doc = (REPO / "docs" / "scale-out.md").read_text()
    section = doc.split("## Deployment rules", 1)[1].split("\n## ", 1)[0]
    missing = [k for k in DOC_KEYS if f"`{k}`" not in section]
    assert not missing, missing
