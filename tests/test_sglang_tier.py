"""The slow layer: SGLang 0.5.23's real parser and resolution (CPU venv, simulated SM120)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kimi_serve.check.sglang_tier import SGLangPython, run_probe
from kimi_serve.simulator.stand_in import STANDIN_MODEL

REPO = Path(__file__).resolve().parent.parent


def test_prod_check_offline_passes_with_real_sglang(cli, sglang_python):
    res = cli("check", "--profile", "prod", "--offline", "--json")
    report = json.loads(res.out)
    sg = {f["code"]: f for f in report["findings"] if f["layer"] == "sglang"}
    assert sg["parse"]["status"] == "pass", sg
    assert sg["resolve"]["status"] == "pass", sg
    assert "draft tokens 4" in sg["resolve"]["message"] and "fusion trtllm" in sg["resolve"]["message"]
    assert res.code == 0, report


def test_real_parser_agrees_with_the_table_on_the_abbreviation_trap(sglang_python):
    base = ["--model-path", str(STANDIN_MODEL), "--device", "cuda"]
    out = run_probe(SGLangPython(sglang_python, "test"), base + ["--cuda-graph-max-bs", "8"], platform="sm120")
    assert out["parse"]["ok"] is False and "ambiguous" in out["parse"]["error"]
    ok = run_probe(SGLangPython(sglang_python, "test"), base + ["--cuda-graph-max-bs-decode", "8"], platform="sm120")
    assert ok["parse"]["ok"] is True and ok["resolve"]["ok"] is True


def test_sglang_resolution_catches_what_only_sglang_knows(write_profile, cli, sglang_python):
    # topk > 1 with the trtllm_mha attention backend: a rule inside SGLang's speculative hook, not ours.
    path = write_profile(
        "extends: prod\nspeculative:\n  eagle_topk: 2\n  num_draft_tokens: 8\n  overlap_schedule: false\n"
        "extra_args: ['--attention-backend', 'trtllm_mha']\n"
    )
    assert cli("render", "--profile", str(path)).code == 0  # the fast layers accept it
    res = cli("check", "--profile", str(path), "--offline", "--json")
    sg = {f["code"]: f for f in json.loads(res.out)["findings"] if f["layer"] == "sglang"}
    assert sg["resolve"]["status"] == "fail" and "topk" in sg["resolve"]["message"].lower()
    assert res.code == 2


def test_committed_flag_table_matches_real_sglang(sglang_python, tmp_path):
    out = subprocess.run(
        [sglang_python, str(REPO / "scripts" / "gen-flag-table.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    fresh = json.loads(out.stdout)
    committed = json.loads((REPO / "kimi_serve" / "profile" / "data" / "sglang-0.5.23-flags.json").read_text())
    assert fresh["sglang_version"] == committed["sglang_version"] == "0.5.23"
    assert fresh["options"] == committed["options"]
    assert fresh["env"] == committed["env"]


def test_check_without_sglang_says_it_used_the_table(cli, monkeypatch):
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    if __import__("importlib").util.find_spec("sglang") is not None:
        pytest.skip("this interpreter has sglang")
    res = cli("check", "--profile", "prod", "--offline", "--json")
    sg = [f for f in json.loads(res.out)["findings"] if f["layer"] == "sglang"]
    assert sg[0]["status"] == "skip" and "flag table" in sg[0]["message"]
    assert res.code == 0


def test_the_probe_server_answers_as_a_fresh_interpreter_does(sglang_python, sglang_session, tmp_path, monkeypatch):
    """The run's probe server (one SGLang import for every probe) gives the verdict a cold `python -m
    kimi_serve.sglang.probe` gives, in the caller's working directory: a relative model path resolves from there."""
    assert sglang_session.probe_socket, "scripts/test.sh's runs start a probe server (tests/conftest.py)"
    model = tmp_path / "model"
    shutil.copytree(STANDIN_MODEL, model)
    monkeypatch.chdir(tmp_path)
    args = ["--model-path", "model", "--trust-remote-code", "--tp-size", "8", "--device", "cuda"]
    served = run_probe(SGLangPython(sglang_python, "test"), args)
    monkeypatch.delenv("KIMI_SERVE_PROBE_SOCKET")
    cold = run_probe(SGLangPython(sglang_python, "test"), args)
    assert served == cold and served["resolve"]["ok"], served
    assert served["resolve"]["values"]["tp_size"] == 8
