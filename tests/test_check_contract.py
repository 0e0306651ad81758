"""`check --contract`: the profile's exact flags on the simulator (SGLang's own serving layer), verify against it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest


def _contract(res):
    return [f for f in json.loads(res.out)["findings"] if f["layer"] == "contract"]


def test_prod_passes_the_contract_dry_run_offline(cli, sglang_python):
    res = cli("check", "--profile", "prod", "--offline", "--contract", "--json")
    contract = _contract(res)
    assert res.code == 0, contract
    names = {f["code"] for f in contract if f["status"] == "pass"}
    assert {"tool/non-stream", "tool/stream", "reasoning/non-stream", "reasoning/stream"} <= names
    # SGLang resolved prod's draft class (the stand-in of kimi-k2.5-eagle3-mla), as the real start resolves it
    (draft,) = [f["message"] for f in contract if f["code"] == "draft" and f["status"] == "pass"]
    assert draft.startswith(
        "draft: SGLang 0.5.23 resolves Eagle3DeepseekV2ForCausalLM (sglang.srt.models.kimi_k25_eagle3) for the draft "
    ), draft
    assert "MLA attention (kv_lora_rank 512, q_lora_rank 1536" in draft and "1 layer" in draft, draft


def test_a_draft_whose_class_sglang_lacks_fails_the_dry_run_with_one_line(cli, write_profile, tmp_path, sglang_python):
    """A real draft directory (not the stand-in) whose config.json names a class SGLang 0.5.23 has no module for:
    SGLang's start would fail to load it, so the dry run fails, naming the file, the class and the fix."""
    from kimi_serve.simulator.stand_in import STANDIN_DRAFT

    draft = tmp_path / "kimi-k2.5-eagle3-typo"
    draft.mkdir()
    config = json.loads((STANDIN_DRAFT / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, "architectures": ["Eagle3DeepseekV3ForCausalLM"]}))
    path = write_profile(f"extends: prod\nspeculative:\n  draft_model_path: {draft}\n")
    res = cli("check", "--profile", str(path), "--offline", "--contract")
    assert res.code == 1, res.out
    fails = [line for line in res.out.splitlines() if line.startswith("FAIL ")]
    assert fails == [
        "FAIL [contract] contract dry run could not start: the simulator refused the profile's launch: "
        f"{draft / 'config.json'}: architectures: SGLang 0.5.23 has no model class Eagle3DeepseekV3ForCausalLM: no "
        "module of sglang.srt.models registers it, so the real start cannot load this draft (fix: name the draft's "
        "class in architectures (Eagle3DeepseekV2ForCausalLM for prod's kimi-k2.5-eagle3-mla), or point "
        "speculative.draft_model_path at a draft SGLang 0.5.23 supports)"
    ], res.out
    assert "Traceback" not in res.out


def test_removing_the_tool_parser_fails_with_the_seeds_diagnosis(cli, write_profile, sglang_python):
    path = write_profile("extends: prod\nparsers:\n  tool_call: null\n")
    res = cli("check", "--profile", str(path), "--offline", "--contract")
    assert res.code == 2  # the rule fails first (invalid profile) ...
    contract_fails = [line for line in res.out.splitlines() if line.startswith("FAIL [contract]")]
    # ... and the dry run shows what clients would get: raw tool-call tokens, fixed by the parser flag
    assert any("tool/" in line and "--tool-call-parser kimi_k2" in line for line in contract_fails), res.out


def _child_env(pid: int) -> dict[str, str]:
    """The simulator's environment, once it has one: read between fork and exec (a busy machine), it is empty."""
    deadline = time.monotonic() + 30
    while True:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        env = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
        if "PYTHONUNBUFFERED" in env or time.monotonic() > deadline:  # launcher.environment always sets it
            return env
        time.sleep(0.05)


@pytest.mark.parametrize("profile_text", [None, "extends: sim\nenv:\n  KIMI_SERVE_SIM_STEP_SECONDS: '0.02'\n"])
def test_the_dry_run_paces_and_waits_like_up(sglang_python, write_profile, tmp_path, profile_text) -> None:
    """Same decode pacing as `up` (the simulator's default step or the profile's env), same start deadline."""
    from kimi_serve.check.dryrun import start_contract_dryrun
    from kimi_serve.check.launch import launch_for, server_env
    from kimi_serve.core.settings import SIM_STEP_ENV
    from kimi_serve.profile.loader import load_profile

    profile = load_profile(str(write_profile(profile_text)) if profile_text else "sim")
    pending = start_contract_dryrun(profile, stand_in_key=True, log_dir=tmp_path)
    try:
        env = _child_env(pending.sim.server.proc.pid)
    finally:
        pending.cancel()
    assert env.get(SIM_STEP_ENV) == server_env(launch_for(profile)).get(SIM_STEP_ENV)
    assert env.get(SIM_STEP_ENV) == ("0.02" if profile_text else None)
    assert pending.startup_timeout == float(profile.startup.timeout)
