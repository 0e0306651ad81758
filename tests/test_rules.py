"""Deployment rules: each has a failing profile whose `render` exits 2 with one line naming the key and the fix."""

from __future__ import annotations

import json

import pytest

from tests.test_profile import assert_one_line_error

BAD = [
    (
        "parsers:\n  tool_call: null\n",
        [
            "parsers.tool_call",
            "no tool-call parser is set",
            "raw <|tool_calls_section_begin|>",
            "--tool-call-parser kimi_k2",
        ],
    ),
    ("parsers:\n  tool_call: qwen\n", ["parsers.tool_call", "'qwen'"]),
    (
        "parsers:\n  reasoning: null\n",
        ["parsers.reasoning", "no reasoning parser is set", "</think>", "set parsers.reasoning: kimi_k2"],
    ),
    ("model:\n  trust_remote_code: false\n", ["model.trust_remote_code", "--trust-remote-code"]),
    ("model:\n  served_name: 'kimi:k2'\n", ["model.served_name", "':'"]),
    ("gpus: 4\n", ["parallel.tp_size", "differs from gpus 4"]),
    ("gpus: 6\nparallel:\n  tp_size: 6\n", ["parallel.tp_size", "does not divide", "64"]),
    (
        "speculative:\n  num_draft_tokens: 6\n",
        ["speculative.num_draft_tokens", "num_steps + 1 = 4", "silently rewrite"],
    ),
    ("speculative:\n  draft_model_path: null\n", ["speculative.draft_model_path", "draft model"]),
    ("speculative:\n  eagle_topk: 4\n  num_draft_tokens: 8\n", ["speculative.eagle_topk", "overlap"]),
    ("extra_args: ['--disable-overlap-schedule']\n", ["extra_args", "contradicts"]),
    ("patch_set: null\n", ["patch_set", "need SGLang source patches", "sglang-0.5.23-sm120"]),
    ("server:\n  api_key_file: null\n", ["server.host", "without an API key", "api_key_file"]),
    ("extra_args: ['--api-key', 'sk-123']\n", ["extra_args", "secret on the command line"]),
    (
        "extra_args: ['--cuda-graph-max-bs', '64']\n",
        ["--cuda-graph-max-bs", "abbreviated", "--cuda-graph-max-bs-decode"],
    ),
    ("extra_args: ['--enable-flashinfer-allreduce-fusion']\n", ["deprecated", "--flashinfer-allreduce-fusion-backend"]),
    ("extra_args: ['--tp-size', '8']\n", ["--tp-size", "given twice"]),
    (
        "env:\n  SGLANG_ENABLE_SPEC_V2: '1'\n",
        ["env.SGLANG_ENABLE_SPEC_V2", "unknown to SGLang 0.5.23", "spec v2 is the default"],
    ),
]


@pytest.mark.parametrize("body, needles", BAD, ids=[b.splitlines()[0] for b, _ in BAD])
def test_rule_rejects(write_profile, cli, body, needles):
    path = write_profile("extends: prod\n" + body)
    assert_one_line_error(cli("render", "--profile", str(path)), *needles)


@pytest.fixture(autouse=True)
def _fast_layers_only(monkeypatch):
    """These tests are about kimi-serve's own layers: skip the ~12 s SGLang probe (tests/test_sglang_tier.py has it)."""
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)


def test_render_counts_further_failures(write_profile, cli):
    path = write_profile("extends: prod\nparsers:\n  tool_call: null\n  reasoning: null\n")
    res = cli("render", "--profile", str(path))
    assert_one_line_error(res, "parsers.tool_call", "+1 more", "kimi-serve check")


def test_unauthenticated_allowed_explicitly_is_a_warning(write_profile, cli):
    path = write_profile("extends: prod\nallow_unauthenticated: true\nserver:\n  api_key_file: null\n")
    assert cli("render", "--profile", str(path)).code == 0
    res = cli("check", "--profile", str(path), "--offline", "--json")
    warn = [f for f in json.loads(res.out)["findings"] if f["code"] == "allow_unauthenticated"]
    assert warn and warn[0]["status"] == "warn"


def test_loopback_without_key_is_fine(write_profile, cli):
    path = write_profile("extends: prod\nserver:\n  host: 127.0.0.1\n  api_key_file: null\n")
    assert cli("render", "--profile", str(path)).code == 0


def test_nccl_symm_mem_with_pcie_ipc_warns(write_profile, cli):
    path = write_profile("extends: prod\nallreduce:\n  nccl_symm_mem: true\n")
    assert cli("render", "--profile", str(path)).code == 0  # a warning does not block
    res = cli("check", "--profile", str(path), "--offline", "--json")
    f = [f for f in json.loads(res.out)["findings"] if f["code"] == "allreduce.nccl_symm_mem"]
    assert f and f[0]["status"] == "warn" and "bypasses the PCIe-IPC" in f[0]["message"]


def test_implicit_memory_knobs_warn(write_profile, cli):
    path = write_profile("extends: prod\nmemory:\n  mem_fraction_static: null\n")
    res = cli("check", "--profile", str(path), "--offline", "--json")
    f = [f for f in json.loads(res.out)["findings"] if f["code"] == "memory.mem_fraction_static"]
    assert f and f[0]["status"] == "warn"
    last = cli("check", "--profile", str(path), "--offline").out.strip().splitlines()[-1]
    assert last.startswith("check PASSED: ") and ", 1 warning, 0 failed, " in last, last  # not "1 warnings"


def test_check_lists_every_failure_and_exits_2(write_profile, cli):
    path = write_profile("extends: prod\nparsers:\n  tool_call: null\n  reasoning: null\ngpus: 4\n")
    res = cli("check", "--profile", str(path), "--offline")
    assert res.code == 2
    fails = [line for line in res.out.splitlines() if line.startswith("FAIL")]
    assert len(fails) >= 3 and "check FAILED" in res.out


def test_host_facts_fail_without_offline(write_profile, cli, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    key = tmp_path / "key.yaml"
    key.write_text("api-key: x\n")
    key.chmod(0o644)
    path = write_profile(f"extends: prod\nmodel:\n  path: {model}\nserver:\n  api_key_file: {key}\n")
    res = cli("check", "--profile", str(path), "--json")
    by_name = {f["code"]: f for f in json.loads(res.out)["findings"] if f["layer"] == "host"}
    assert by_name["model.path"]["status"] == "fail" and "config.json is missing" in by_name["model.path"]["message"]
    assert by_name["server.api_key_file"]["status"] == "fail" and "chmod 600" in by_name["server.api_key_file"]["fix"]
    assert by_name["speculative.draft_model_path"]["status"] == "fail"
    assert res.code == 1  # the profile is valid; the host is not ready
    offline = cli("check", "--profile", str(path), "--offline", "--json")
    assert not [f for f in json.loads(offline.out)["findings"] if f["layer"] == "host"]


def _set_without_redaction(tmp_path):
    """A copy of the shipped set whose manifest lacks patch 0006 and its feature (the set before redaction existed)."""
    import shutil

    from kimi_serve.patches import load_patch_set

    shipped = load_patch_set("sglang-0.5.23-sm120")
    copy = shutil.copytree(shipped.directory, tmp_path / "set-without-redaction")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["patches"] = [p for p in manifest["patches"] if p["feature"] != "redact_api_key_in_log"]
    kept = {rel for p in manifest["patches"] for rel in p["files"]}
    manifest["files"] = {rel: h for rel, h in manifest["files"].items() if rel in kept}
    del manifest["features"]["redact_api_key_in_log"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert "redact_api_key_in_log" not in load_patch_set(str(copy)).features  # loads: a valid set
    return copy


def test_api_key_with_a_set_that_does_not_redact_it_warns(write_profile, cli, tmp_path):
    path = write_profile(f"extends: prod\npatch_set: {_set_without_redaction(tmp_path)}\n")
    assert cli("render", "--profile", str(path)).code == 0  # a warning does not block
    res = cli("check", "--profile", str(path), "--offline", "--json")
    f = [f for f in json.loads(res.out)["findings"] if f["code"] == "patch_set.redact"]
    assert len(f) == 1 and f[0]["status"] == "warn"
    assert "written to the journal" in f[0]["message"] and "redact_api_key_in_log" in f[0]["fix"]
    assert f[0]["where"].endswith(": patch_set")
    # The SM120 features are still covered: only the redaction is missing.
    assert [g["status"] for g in json.loads(res.out)["findings"] if g["code"] == "patch_set"] == ["pass"]


def test_redaction_matters_only_when_sglang_gets_a_key(write_profile, cli, tmp_path):
    no_set = write_profile(
        "extends: prod\npatch_set: null\nallreduce:\n  flashinfer_fusion_backend: null\n  torch_symm_mem: false\n",
        name="no-set",
    )
    no_key = write_profile(
        f"extends: prod\npatch_set: {_set_without_redaction(tmp_path)}\n"
        "server:\n  host: 127.0.0.1\n  api_key_file: null\n",
        name="no-key",
    )
    statuses = {}
    for path in (no_set, no_key, "prod"):
        res = cli("check", "--profile", str(path), "--offline", "--json")
        statuses[path] = [f["status"] for f in json.loads(res.out)["findings"] if f["code"] == "patch_set.redact"]
    assert statuses == {no_set: ["warn"], no_key: ["pass"], "prod": ["pass"]}
