"""Behaviour of the patched code in SGLang 0.5.23's own sources, unpatched vs patched: the SM120 gates under a simulated
SM120 machine, the API keys in the startup log and in /server_info (the SM120 set, patches/sglang-0.5.23), and the
kimi_k2 parser faults and Moonshot's thinking field on SGLang's own detector and OpenAI serving layer (the Kimi set,
patches/sglang-0.5.23-kimi).

Two scratch copies of the whole sglang package come from the pinned wheel; one gets `apply` of both sets (they touch
different files). Each is probed by tests/sm120_gate_probe.py, tests/redact_log_probe.py,
tests/redact_server_info_probe.py and tests/kimi_parser_probe.py in the CPU SGLang interpreter
(KIMI_SERVE_SGLANG_PYTHON) with the copy first on sys.path, so the venv's own site-packages is only read, never
changed: one interpreter per copy imports it once, and each probe runs in a forked child of it (tests/probe_batch.py).
The probes list their stand-ins.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from patches_support import extract, pinned_wheel
from sim_pool import SGLangSession

from kimi_serve.patches import apply, load_patch_set

PROBE = Path(__file__).with_name("sm120_gate_probe.py")
REDACT_PROBE = Path(__file__).with_name("redact_log_probe.py")
INFO_PROBE = Path(__file__).with_name("redact_server_info_probe.py")
KIMI_PROBE = Path(__file__).with_name("kimi_parser_probe.py")
REPO = Path(__file__).resolve().parent.parent
API_KEY, ADMIN_KEY = "sk-kimi-probe-7f3a9c", "adm-kimi-probe-51d2e8"
SM120_ONLY = "FlashInfer allreduce fusion on SM120 supports only the trtllm backend on a single node."


BATCH = Path(__file__).with_name("probe_batch.py")


@pytest.fixture(scope="module")
def copies(sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The CPU SGLang interpreter, an unpatched and a patched scratch copy of sglang, and the stand-in flashinfer."""
    python = sglang_session.python
    patch_set = load_patch_set("sglang-0.5.23-sm120")
    wheel = pinned_wheel(patch_set)
    root = tmp_path_factory.mktemp("sglang-copies")
    stub = root / "stand-in-flashinfer"
    (stub / "flashinfer").mkdir(parents=True)
    (stub / "flashinfer" / "__init__.py").write_text('"""Stand-in: lets find_spec("flashinfer") succeed."""\n')
    unpatched = extract(wheel, root / "unpatched", whole_package=True)
    patched = extract(wheel, root / "patched", whole_package=True)
    assert apply(patched, patch_set, state_dir=root / "state").status.all_applied
    assert apply(patched, load_patch_set("sglang-0.5.23-kimi"), state_dir=root / "state").status.all_applied
    return {"python": Path(python), "unpatched": unpatched, "patched": patched, "stub": stub, "root": root}


@pytest.fixture(scope="module")
def answers(copies: dict[str, Path]) -> dict[str, dict[str, dict]]:
    """Each copy's four probes, run by tests/probe_batch.py: one sglang import per copy, a forked child per probe."""
    key_file = copies["root"] / "secrets.yaml"  # as kimi-serve hands the key to SGLang: --config FILE
    key_file.write_text(f"api-key: {API_KEY}\nadmin-api-key: {ADMIN_KEY}\n")
    out = {}
    for which in ("unpatched", "patched"):
        site = copies[which]
        argv = [str(copies["python"]), str(BATCH), str(site)]
        argv += [str(PROBE), str(copies["stub"]), str(REDACT_PROBE), str(key_file), str(INFO_PROBE), str(key_file)]
        argv += [str(KIMI_PROBE), str(REPO)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = json.loads(proc.stdout.strip().splitlines()[-1])
        for name, result in results.items():
            assert "module" in result, f"{which} {name} failed: {result}"
            assert result["module"].startswith(str(site)), f"{name} imported another sglang than the scratch copy"
        out[which] = results
    return out


@pytest.fixture(scope="module")
def probes(answers: dict[str, dict[str, dict]]) -> dict[str, dict]:
    return {which: answers[which][PROBE.name] for which in answers}


@pytest.fixture(scope="module")
def startup_log(answers: dict[str, dict[str, dict]]) -> dict[str, dict]:
    return {which: answers[which][REDACT_PROBE.name] for which in answers}


@pytest.fixture(scope="module")
def server_info(answers: dict[str, dict[str, dict]]) -> dict[str, dict]:
    return {which: answers[which][INFO_PROBE.name] for which in answers}


@pytest.fixture(scope="module")
def kimi(answers: dict[str, dict[str, dict]]) -> dict[str, dict]:
    return {which: answers[which][KIMI_PROBE.name] for which in answers}


def test_fusion_backend_resolves_to_trtllm_instead_of_raising(probes: dict[str, dict]) -> None:
    before, after = probes["unpatched"], probes["patched"]
    assert "requires SM90 or SM10X" in before["fusion_resolve_configured"]["error"]
    assert all("requires SM90 or SM10X" in r["error"] for r in before["fusion_resolve"].values())
    assert after["fusion_resolve_configured"] == {"value": "trtllm"}  # the prod flag, as model-runner init calls it
    assert after["fusion_resolve"]["auto"] == {"value": "trtllm"}
    assert after["fusion_resolve"]["trtllm"] == {"value": "trtllm"}
    # Still refused where SM120 cannot do it: mnnvl needs NVLink multicast; multi-node is unsupported.
    assert after["fusion_resolve"]["mnnvl"]["error"].endswith(SM120_ONLY)
    assert after["fusion_resolve_multi_node"]["error"].endswith(SM120_ONLY)


def test_fusion_backend_unchanged_on_sm90_and_sm100(probes: dict[str, dict]) -> None:
    for arch in ("fusion_resolve_sm90", "fusion_resolve_sm100"):
        assert probes["patched"][arch] == probes["unpatched"][arch]
    assert probes["patched"]["fusion_resolve_sm100"]["auto"] == {"value": "mnnvl"}


def test_fused_add_rmsnorm_allreduce_gate_accepts_sm120(probes: dict[str, dict]) -> None:
    assert probes["unpatched"]["add_norm_fusion_applies"] == {"1": False, "16": False, "2048": False, "2049": False}
    # Patched: taken up to FUSE_ALLREDUCE_MAX_BATCH_SIZE (2048 tokens), as on SM90/SM100.
    assert probes["patched"]["add_norm_fusion_applies"] == {"1": True, "16": True, "2048": True, "2049": False}


def test_workspace_preflight_needs_no_multicast(probes: dict[str, dict]) -> None:
    before, after = probes["unpatched"]["preflight_sizes"], probes["patched"]["preflight_sizes"]
    assert "cuMulticastGetGranularity failed" in before["no_multicast"]["error"]
    sizes = after["no_multicast"]["value"]
    assert len(sizes) == 3 and all(s % (2 << 20) == 0 for s in sizes)
    assert after["multicast"] == before["multicast"]  # NVLink/NVSwitch systems: same sizes as upstream


def test_torch_symm_mem_engages_on_sm120_with_two_shot(probes: dict[str, dict]) -> None:
    before, after = probes["unpatched"], probes["patched"]
    assert before["symm_mem_sizes_12"] is None
    assert before["symm_mem"] == {"disabled": True, "max_size": 0}
    assert after["symm_mem_sizes_12"] == {"2": 64 << 20, "4": 64 << 20, "6": 128 << 20, "8": 128 << 20}
    assert after["symm_mem"]["disabled"] is False and after["symm_mem"]["kernel"] == "two_shot"
    # Upstream enlarges the buffer past the table (SGLANG_OPT_USE_INKLING_* default on): docs/patches.md, limits.
    assert after["symm_mem"]["max_size"] == 512 << 20


def test_torch_symm_mem_no_longer_requires_multicast(probes: dict[str, dict]) -> None:
    # With a size entry for capability 12 in both copies, only the multicast requirement differs.
    assert probes["unpatched"]["symm_mem_with_size_entry"]["disabled"] is True
    assert probes["patched"]["symm_mem_with_size_entry"]["disabled"] is False
    assert probes["patched"]["symm_mem_with_size_entry"]["kernel"] == "two_shot"


def test_startup_log_redacts_the_api_keys(startup_log: dict[str, dict]) -> None:
    before, after = startup_log["unpatched"], startup_log["patched"]
    # Upstream writes both keys, read from the --config file, into the server_args= startup line.
    assert API_KEY in before["line"] and ADMIN_KEY in before["line"]
    assert before["logged"]["api_key"] == API_KEY and before["logged"]["admin_api_key"] == ADMIN_KEY
    assert API_KEY not in after["line"] and ADMIN_KEY not in after["line"]
    assert after["logged"] == {"api_key": "<redacted>", "admin_api_key": "<redacted>", "model_path": "dummy"}
    # Only the log is redacted: the server still authenticates with the real keys, and unset keys stay unset.
    assert (after["api_key"], after["admin_api_key"]) == (API_KEY, ADMIN_KEY)
    assert after["logged_without_keys"] == {"api_key": None, "admin_api_key": None}


def test_server_info_redacts_the_api_keys(server_info: dict[str, dict]) -> None:
    before, after = server_info["unpatched"], server_info["patched"]
    # Upstream returns both keys, and a launch command holding them, from /server_info and /get_server_info.
    for route in ("server_info", "get_server_info"):
        assert before[route]["api_key"] == API_KEY and before[route]["admin_api_key"] == ADMIN_KEY
        assert API_KEY in before[route]["launch_command"] and ADMIN_KEY in before[route]["launch_command"]
    # Patched (0007): neither key anywhere in the body; the launch command keeps its shape.
    assert API_KEY not in after["body"] and ADMIN_KEY not in after["body"]
    for route in ("server_info", "get_server_info"):
        assert after[route]["api_key"] == "<redacted>" and after[route]["admin_api_key"] == "<redacted>"
        assert "--api-key <redacted>" in after[route]["launch_command"]
        assert "--admin-api-key <redacted>" in after[route]["launch_command"]
    assert after["server_info"]["model_path"] == "dummy"
    # The server still authenticates with the real keys, and unset keys stay unset.
    assert (after["api_key"], after["admin_api_key"]) == (API_KEY, ADMIN_KEY)
    assert after["unkeyed"] == {"api_key": None, "admin_api_key": None}


def test_a_tool_call_id_outside_the_patterns_keeps_its_call(kimi: dict[str, dict]) -> None:
    before, after = kimi["unpatched"]["unexpected_id"], kimi["patched"]["unexpected_id"]
    assert before["non_stream"]["finish_reason"] == "stop" and before["non_stream"]["calls"] == []  # the call lost
    assert before["stream"]["names"] == [] and before["stream"]["finish_reason"] == "stop"
    assert after["non_stream"]["finish_reason"] == "tool_calls"
    assert [c[:2] for c in after["non_stream"]["calls"]] == [["functions.get_weather:0", "get_weather"]]
    assert after["stream"]["names"] == ["get_weather"] and after["stream"]["finish_reason"] == "tool_calls"


def test_streamed_argument_deltas_carry_no_null_id_or_name(kimi: dict[str, dict]) -> None:
    before, after = kimi["unpatched"]["continuation"]["stream"], kimi["patched"]["continuation"]["stream"]
    assert len(before["deltas"]) > 1 and len(after["deltas"]) == len(before["deltas"])
    for run in (before, after):  # the first delta of the call has both
        assert "id" in run["deltas"][0]["keys"] and "name" in run["deltas"][0]["function_keys"]
    assert all("id" in d["keys"] and "name" in d["function_keys"] for d in before["deltas"][1:])  # "id": null ...
    assert all("id" not in d["keys"] and d["function_keys"] == ["arguments"] for d in after["deltas"][1:])
    assert kimi["patched"]["continuation"]["non_stream"] == kimi["unpatched"]["continuation"]["non_stream"]


def test_a_bare_tool_call_begin_parses_the_same_streamed_and_not(kimi: dict[str, dict]) -> None:
    before, after = kimi["unpatched"]["bare_begin"], kimi["patched"]["bare_begin"]
    assert before["stream"]["names"] == ["get_weather"]  # streaming took it
    assert before["non_stream"]["calls"] == [] and "<|tool_call_begin|>" in before["non_stream"]["content"]
    assert before["non_stream"]["finish_reason"] == "stop"
    assert [c[1] for c in after["non_stream"]["calls"]] == after["stream"]["names"] == ["get_weather"]
    assert after["non_stream"]["finish_reason"] == after["stream"]["finish_reason"] == "tool_calls"
    assert not after["non_stream"]["content"]


def test_verify_reports_the_unpatched_parser_and_passes_the_patched_one(kimi: dict[str, dict]) -> None:
    """verify's parser probes (POST /parse_function_call, kimi_serve/verify/parser_faults.py) judged on SGLang's real
    detector: a warning naming each fault and the Kimi patch set on the unpatched copy, a pass on the patched one."""
    from kimi_serve.verify.parser_faults import CASES, judge

    for code, _, what in CASES:
        status, body = kimi["unpatched"]["parse_function_call"][code]
        before = judge(code, what, status, body)
        assert status == 200 and before.status == "warn" and "sglang-0.5.23-kimi" in before.fix, before
        status, body = kimi["patched"]["parse_function_call"][code]
        after = judge(code, what, status, body)
        assert after.status == "pass", (code, body)


def test_moonshot_thinking_field_switches_thinking(kimi: dict[str, dict]) -> None:
    """Moonshot's ``thinking: {"type": "disabled"}`` (kimi-cli's --no-thinking) on SGLang's real serving layer in front
    of the simulator's scripted Kimi, which thinks unless the prompt SGLang rendered ends in ``<think></think>``:
    unpatched SGLang ignores the field (reasoning comes back), patch 0004 turns thinking off, streamed and not."""
    before, after = kimi["unpatched"]["thinking"], kimi["patched"]["thinking"]
    for run in (before, after):
        assert run["default"]["reasoning"] and run["moonshot_enabled"]["reasoning"]
        assert run["kwargs_off"]["reasoning"] is None and run["kwargs_off"]["content"]  # SGLang's own switch
        assert run["kwargs_win_over_moonshot"]["reasoning"]  # an explicit chat_template_kwargs thinking wins
        assert run["adaptive"]["reasoning"]  # other types are left alone
    for case in ("moonshot_disabled", "moonshot_disabled_stream", "moonshot_disabled_over_effort"):
        assert before[case]["reasoning"], case  # ignored: thinking stays on
        assert after[case]["reasoning"] is None and after[case]["content"], case
    assert after["moonshot_disabled"]["content"] == before["kwargs_off"]["content"]


def test_verify_dialect_probe_shows_the_moonshot_field_ignored_then_honoured(kimi: dict[str, dict]) -> None:
    """verify's thinking-dialect judgement (kimi_serve/verify/agent_rules.py) on SGLang's real answers to Moonshot's
    ``thinking: {"type": "disabled"}``: a warning naming the clients that send it on the unpatched copy, none with
    patch 0004 (what `verify` reports as ``thinking_off.thinking``: ignored, then honoured)."""
    from kimi_serve.verify.agent_rules import DIALECTS, dialect_findings
    from kimi_serve.verify.answer import Answer

    clients = next(who for name, _, who in DIALECTS if name == "thinking")
    for case in ("moonshot_disabled", "moonshot_disabled_stream"):
        before, after = (kimi[which]["thinking"][case] for which in ("unpatched", "patched"))
        found = dialect_findings(Answer(content=before["content"], reasoning=before["reasoning"]), "thinking", clients)
        assert [f.code for f in found] == ["thinking_ignored.thinking"], found
        assert "kimi-cli" in found[0].message and "Kimi patch set" in found[0].fix
        assert (
            dialect_findings(Answer(content=after["content"], reasoning=after["reasoning"]), "thinking", clients) == []
        )
