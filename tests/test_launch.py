"""render: golden argv per shipped profile, full flag names, no secrets, JSON shape; the flag-table checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_serve.profile.flags import check_argv, load_flag_table, unknown_sglang_env
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile

PY = "/venv/bin/python"

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.mark.parametrize("name", ["prod", "baseline"])
def test_render_json_matches_golden(name, cli):
    res = cli("render", "--profile", name, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert {k: doc.pop(k) for k in ("kind", "version", "ok", "exit_code", "findings")} == {
        "kind": "kimi-serve-render",
        "version": 1,
        "ok": True,
        "exit_code": 0,
        "findings": [],
    }
    got = doc
    assert set(got) == {"argv", "env"}
    assert got == json.loads((GOLDEN / f"{name}.launch.json").read_text())


def test_sim_profile_has_prods_exact_server_flags_on_the_simulator():
    prod, sim = build_launch(load_profile("prod"), "/opt/py"), build_launch(load_profile("sim"), PY)
    assert sim.argv[:4] == ("/venv/bin/python", "-P", "-m", "kimi_serve.simulator")
    assert prod.argv[1:4] == ("-P", "-m", "sglang.launch_server")

    def without(args, flag):  # the only differences: loopback host and no key file
        out = list(args)
        i = out.index(flag)
        del out[i : i + 2]
        return out

    assert without(without(prod.server_args, "--host"), "--config") == without(sim.server_args, "--host")


def test_prod_argv_is_what_the_mission_asks():
    launch = build_launch(load_profile("prod"), PY)
    a = launch.server_args
    pairs = {a[i]: a[i + 1] for i in range(len(a) - 1)}
    assert pairs["--tool-call-parser"] == "kimi_k2" and pairs["--reasoning-parser"] == "kimi_k2"
    assert pairs["--tp-size"] == "8" and pairs["--speculative-algorithm"] == "EAGLE3"
    assert (
        pairs["--speculative-num-steps"],
        pairs["--speculative-eagle-topk"],
        pairs["--speculative-num-draft-tokens"],
    ) == ("3", "1", "4")
    assert "--disable-overlap-schedule" not in a  # overlap = spec v2
    assert pairs["--flashinfer-allreduce-fusion-backend"] == "trtllm" and "--enable-torch-symm-mem" in a
    assert "--cuda-graph-max-bs-decode" in a and "--cuda-graph-max-bs" not in a
    assert "--enable-flashinfer-allreduce-fusion" not in a
    assert "--trust-remote-code" in a and pairs["--host"] == "0.0.0.0" and pairs["--port"] == "30000"
    assert launch.env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1" and "SGLANG_ENABLE_SPEC_V2" not in launch.env
    # the API key travels in a --config file, never as a value on the command line
    assert "--api-key" not in a and pairs["--config"].endswith(".yaml")


def test_every_generated_flag_is_a_full_current_flag():
    table = load_flag_table()
    for name in ("prod", "baseline", "sim"):
        for arg in build_launch(load_profile(name), PY).server_args:
            if arg.startswith("--"):
                opt = table.options.get(arg)
                assert opt is not None and not opt.deprecated, arg


def test_human_render_is_shell_quoted(write_profile, cli):
    path = write_profile("extends: prod\nmodel:\n  served_name: kimi k2.5 'quoted'\n")
    res = cli("render", "--profile", str(path))
    assert res.code == 0, res.err
    assert "'kimi k2.5 '\"'\"'quoted'\"'\"''" in res.out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--cuda-graph-max-bs", "48"], "abbreviated"),
        (["--tool-call", "kimi_k2"], "abbreviated"),
        (["--enable-flashinfer-allreduce-fusion"], "deprecated"),
        (["--disable-cuda-graph"], "deprecated"),
        (["--no-such-flag"], "unknown to SGLang"),
        (["--tp-size", "eight"], "an integer"),
        (["--mem-fraction-static", "lots"], "a number"),
        (["--tool-call-parser", "kimi_k9"], "invalid value"),
        (["--tp-size", "8", "--tensor-parallel-size", "8"], "given twice"),
        (["--trust-remote-code=yes"], "takes no value"),
        (["--port"], "missing value"),
        (["stray"], "stray value"),
    ],
)
def test_flag_checker_rejects(args, needle):
    problems = check_argv(args)
    assert problems and needle in problems[0].message, problems


def test_flag_checker_accepts_lists_and_inline_values():
    assert check_argv(["--cuda-graph-bs-decode", "1", "2", "4", "--port=30001"]) == []


def test_unknown_sglang_env():
    assert unknown_sglang_env(["SGLANG_ENABLE_SPEC_V2", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "NCCL_DEBUG"]) == [
        "SGLANG_ENABLE_SPEC_V2"
    ]
