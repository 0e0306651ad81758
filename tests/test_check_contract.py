"""`check --contract`: the profile's exact flags on the simulator (SGLang's own serving layer), verify against it."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.sglang


def _contract(res):
    return [f for f in json.loads(res.out)["findings"] if f["layer"] == "contract"]


def test_prod_passes_the_contract_dry_run_offline(cli, sglang_python):
    res = cli("check", "--profile", "prod", "--offline", "--contract", "--json")
    contract = _contract(res)
    assert res.code == 0, contract
    names = {f["code"] for f in contract if f["status"] == "pass"}
    assert {"tool/non-stream", "tool/stream", "reasoning/non-stream", "reasoning/stream"} <= names


def test_removing_the_tool_parser_fails_with_the_seeds_diagnosis(cli, write_profile, sglang_python):
    path = write_profile("extends: prod\nparsers:\n  tool_call: null\n")
    res = cli("check", "--profile", str(path), "--offline", "--contract")
    assert res.code == 2  # the rule fails first (invalid profile) ...
    contract_fails = [line for line in res.out.splitlines() if line.startswith("FAIL [contract]")]
    # ... and the dry run shows what clients would get: raw tool-call tokens, fixed by the parser flag
    assert any("tool/" in line and "--tool-call-parser kimi_k2" in line for line in contract_fails), res.out
