"""Behaviour of the SM120 gates in SGLang 0.5.23's own code, unpatched vs patched, under a simulated SM120 machine.

Two scratch copies of the whole sglang package come from the pinned wheel; one is patched with `apply`. Each is probed
by tests/sm120_gate_probe.py in the CPU SGLang interpreter (KIMI_SERVE_SGLANG_PYTHON) with the copy first on
sys.path, so the venv's own site-packages is only read, never changed. The probe lists its stand-ins.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kimi_serve.patches import apply, load_patch_set
from patches_support import extract, pinned_wheel

pytestmark = pytest.mark.sglang

PROBE = Path(__file__).with_name("sm120_gate_probe.py")
SM120_ONLY = "FlashInfer allreduce fusion on SM120 supports only the trtllm backend on a single node."


def _probe(python: str, site: Path, stub: Path) -> dict:
    proc = subprocess.run([python, str(PROBE), str(site), str(stub)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["module"].startswith(str(site)), "the probe imported another sglang than the scratch copy"
    return result


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
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
    return {"unpatched": _probe(python, unpatched, stub), "patched": _probe(python, patched, stub)}


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
