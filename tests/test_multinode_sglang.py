"""Multi-node argv against SGLang 0.5.23's own parser and check_server_args (CPU venv, simulated SM120): every rank of
TP16 over 2 nodes (with and without EAGLE-3) and TP8 x PP2 is accepted; PP + EAGLE-3, --nnodes 3 with TP8 and
multi-node --dp-size are rejected, with SGLang's own message in `check`'s output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_serve.check.sglang_tier import SGLangPython, _adapt, other_ranks, run_probe
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile

NO_FAST_AR = "allreduce:\n  flashinfer_fusion_backend: null\n  torch_symm_mem: false\n  pcie_ipc: false\n"
TWO_NODES = "nodes:\n  count: 2\n  leader_host: 10.0.0.1\n" + NO_FAST_AR


def _sglang(cli, path_or_name, *extra):
    res = cli("check", "--profile", str(path_or_name), "--offline", "--json", *extra)
    findings = json.loads(res.out)["findings"]
    return res.code, {f["code"]: f for f in findings if f["layer"] == "sglang"}


def test_prod_tp16_every_rank_passes_sglangs_validation(cli, sglang_python):
    code, sg = _sglang(cli, "prod-tp16")
    assert code == 0, sg
    assert sg["parse"]["status"] == "pass" and "rank 0" in sg["parse"]["message"]
    assert sg["resolve"]["status"] == "pass", sg
    assert sg["rank 1"]["status"] == "pass" and "check_server_args accept rank 1's argv" in sg["rank 1"]["message"]


def _args(tmp_path: Path, body: str, name: str) -> list[str]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(body)
    launch = build_launch(load_profile(str(path)), "/unused/python")
    args, _ = _adapt(launch.server_args, tmp_path / "secrets.yaml")
    return args


def test_accepted_and_rejected_shapes_in_one_sglang_interpreter(sglang_python, tmp_path):
    (tmp_path / "secrets.yaml").write_text("api-key: k\n")
    shapes = {  # name -> (profile body, SGLang's verdict: None accepts, else a piece of its message)
        "tp16-eagle3": ("extends: prod\n" + TWO_NODES + "parallel:\n  tp_size: 16\n", None),
        "tp16-plain": ("extends: baseline\n" + TWO_NODES + "parallel:\n  tp_size: 16\n", None),
        "tp8-pp2": ("extends: baseline\n" + TWO_NODES + "parallel:\n  tp_size: 8\n  pp_size: 2\n", None),
        "pp2-eagle3": (
            "extends: prod\n" + TWO_NODES + "parallel:\n  tp_size: 8\n  pp_size: 2\n",
            "only supports EAGLE (non-multi-layer)",
        ),
        "nnodes3-tp8": (
            "extends: prod\n" + TWO_NODES.replace("count: 2", "count: 3"),
            "tp_size must be divisible by number of nodes",
        ),
        "dp2": (
            "extends: prod\n" + TWO_NODES + "parallel:\n  tp_size: 16\nextra_args: ['--dp-size', '2']\n",
            "multi-node data-parallel replicas are not supported",
        ),
    }
    argvs = []
    for name, (body, _) in shapes.items():
        rank0 = _args(tmp_path, body, name)
        argvs += [(name, 0, rank0)] + [(name, i + 1, a) for i, a in enumerate(other_ranks(rank0, 2))]
    out = run_probe(SGLangPython(sglang_python, "test"), argvs[0][2], also=[a for _, _, a in argvs[1:]])
    results = [out] + out["also"]
    assert len(results) == len(argvs) == 12
    for (name, rank, _), res in zip(argvs, results, strict=True):
        expect = shapes[name][1]
        assert res["parse"]["ok"], (name, rank, res["parse"])
        if expect is None:
            assert res["resolve"]["ok"], (name, rank, res["resolve"])
            assert res["resolve"]["values"]["tp_size"] == (8 if name == "tp8-pp2" else 16)
        else:
            assert not res["resolve"]["ok"] and expect in res["resolve"]["error"], (name, rank, res["resolve"])
    pp = results[[n for n, _, _ in argvs].index("tp8-pp2")]["resolve"]["values"]
    assert pp["disable_overlap_schedule"] is True  # SGLang turns overlap off under PP


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "extends: prod\n" + TWO_NODES + "parallel:\n  tp_size: 8\n  pp_size: 2\n",
            "Pipeline parallelism currently only supports EAGLE (non-multi-layer)",
        ),
        ("extends: prod\n" + TWO_NODES.replace("count: 2", "count: 3"), "tp_size must be divisible by number of nodes"),
        (
            "extends: prod\n" + TWO_NODES + "parallel:\n  tp_size: 16\nextra_args: ['--dp-size', '2']\n",
            "multi-node data-parallel replicas are not supported",
        ),
    ],
    ids=["pp-eagle3", "nnodes3-tp8", "multinode-dp2"],
)
def test_sglangs_rejection_surfaces_in_check(write_profile, cli, sglang_python, body, message):
    res = cli("check", "--profile", str(write_profile(body)), "--offline")
    assert res.code == 2
    lines = [line for line in res.out.splitlines() if line.startswith("FAIL [sglang]") and message in line]
    assert any("rejects the configuration under SM120" in line for line in lines), res.out  # rank 0
    assert any("rejects rank 1's argv" in line for line in lines), res.out
