"""Behaviour of the patched code in SGLang 0.5.23's own sources, unpatched vs patched: the SM120 gates under a simulated
SM120 machine, and the API keys in the startup log and in /server_info.

Two scratch copies of the whole sglang package come from the pinned wheel; one is patched with `apply`. Each is probed
by tests/sm120_gate_probe.py, tests/redact_log_probe.py and tests/redact_server_info_probe.py in the CPU SGLang
interpreter (KIMI_SERVE_SGLANG_PYTHON)
with the copy first on sys.path, so the venv's own site-packages is only read, never changed. The probes list their
stand-ins.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from patches_support import extract, pinned_wheel

from kimi_serve.patches import apply, load_patch_set

pytestmark = pytest.mark.sglang

PROBE = Path(__file__).with_name("sm120_gate_probe.py")
REDACT_PROBE = Path(__file__).with_name("redact_log_probe.py")
INFO_PROBE = Path(__file__).with_name("redact_server_info_probe.py")
API_KEY, ADMIN_KEY = "sk-kimi-probe-7f3a9c", "adm-kimi-probe-51d2e8"
SM120_ONLY = "FlashInfer allreduce fusion on SM120 supports only the trtllm backend on a single node."


def _run(python: str, probe: Path, site: Path, arg: Path) -> dict:
    proc = subprocess.run([python, str(probe), str(site), str(arg)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["module"].startswith(str(site)), "the probe imported another sglang than the scratch copy"
    return result


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The CPU SGLang interpreter, an unpatched and a patched scratch copy of sglang, and the stand-in flashinfer."""
    python = os.environ.get("KIMI_SERVE_SGLANG_PYTHON")
    if not python:
        pytest.skip("KIMI_SERVE_SGLANG_PYTHON is not set (CI sets it)")
    patch_set = load_patch_set("sglang-0.5.23-sm120")
    wheel = pinned_wheel(patch_set)
    root = tmp_path_factory.mktemp("sglang-copies")
    stub = root / "stand-in-flashinfer"
    (stub / "flashinfer").mkdir(parents=True)
    (stub / "flashinfer" / "__init__.py").write_text('"""Stand-in: lets find_spec("flashinfer") succeed."""\n')
    unpatched = extract(wheel, root / "unpatched", whole_package=True)
    patched = extract(wheel, root / "patched", whole_package=True)
    assert apply(patched, patch_set, state_dir=root / "state").status.all_applied
    return {"python": Path(python), "unpatched": unpatched, "patched": patched, "stub": stub, "root": root}


@pytest.fixture(scope="module")
def probes(copies: dict[str, Path]) -> dict[str, dict]:
    return {
        which: _run(str(copies["python"]), PROBE, copies[which], copies["stub"]) for which in ("unpatched", "patched")
    }


@pytest.fixture(scope="module")
def startup_log(copies: dict[str, Path]) -> dict[str, dict]:
    key_file = copies["root"] / "secrets.yaml"  # as kimi-serve hands the key to SGLang: --config FILE
    key_file.write_text(f"api-key: {API_KEY}\nadmin-api-key: {ADMIN_KEY}\n")
    return {
        which: _run(str(copies["python"]), REDACT_PROBE, copies[which], key_file) for which in ("unpatched", "patched")
    }


@pytest.fixture(scope="module")
def server_info(copies: dict[str, Path]) -> dict[str, dict]:
    key_file = copies["root"] / "secrets-info.yaml"
    key_file.write_text(f"api-key: {API_KEY}\nadmin-api-key: {ADMIN_KEY}\n")
    return {
        which: _run(str(copies["python"]), INFO_PROBE, copies[which], key_file) for which in ("unpatched", "patched")
    }


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
