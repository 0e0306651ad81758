"""Probe SGLang 0.5.23's SM120 gates in one copy of the sglang package; prints one JSON object.

Run with the CPU SGLang interpreter: ``python sm120_gate_probe.py SITE_DIR STUB_DIR``. SITE_DIR goes first on sys.path,
so this imports that copy of sglang (patched or not), never the venv's own. The machine is declared SM120 through
SGLang's own ``override_platform`` (facts from the reference recipe), and a real ServerArgs for the prod-like flags is
resolved and published. What a CPU cannot provide is replaced by stand-ins, each named where it is made:
``torch.cuda`` availability/capability, a ``flashinfer`` package that only exists for ``find_spec``, the CUDA driver
bindings the workspace preflight calls, and torch symmetric memory's allocator, rendezvous and kernels.
"""

from __future__ import annotations

import importlib
import json
import sys
import types

SITE, STUB = sys.argv[1], sys.argv[2]
sys.path.insert(0, SITE)
sys.path.append(STUB)  # stand-in `flashinfer` package: importlib.util.find_spec("flashinfer") succeeds, nothing more

import sglang.srt.runtime_context as rc  # noqa: E402
import torch  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

SM120 = dict(
    is_cuda=True,
    is_hip=False,
    is_sm120=True,
    is_blackwell=True,
    is_sm100=False,
    is_sm90=False,
    is_sm100_or_sm110=False,
    is_sm110=False,
    has_flashinfer=True,
    device_sm=120,
    device_capability=(12, 0),
    is_hopper_with_cuda_12_3=False,
)
SM90 = dict(SM120, is_sm120=False, is_blackwell=False, is_sm90=True, device_sm=90, device_capability=(9, 0))
SM100 = dict(SM120, is_sm120=False, is_sm100=True, is_sm100_or_sm110=True, device_sm=100, device_capability=(10, 0))
out: dict = {}


def outcome(fn):
    try:
        return {"value": fn()}
    except Exception as exc:  # noqa: BLE001 - the probe reports what SGLang raised
        return {"error": f"{type(exc).__name__}: {exc}"}


rc.override_platform(**SM120).install()
server_args = prepare_server_args(
    [
        "--model-path",
        "dummy",
        "--device",
        "cuda",
        "--tp-size",
        "8",
        "--flashinfer-allreduce-fusion-backend",
        "trtllm",
        "--enable-torch-symm-mem",
    ]
)
server_args.resolve_once()
rc.publish(server_args, role="tokenizer")

# ---- G3/G3b: FlashInfer fusion backend resolution (model-runner init path)
import sglang.srt.layers.flashinfer_comm_fusion as fusion  # noqa: E402

out["module"] = fusion.__file__
out["fusion_resolve_configured"] = outcome(fusion.resolve_flashinfer_allreduce_fusion_backend)
out["fusion_resolve"] = {b: outcome(lambda b=b: fusion._resolve_backend(b)) for b in ("auto", "trtllm", "mnnvl")}
out["fusion_resolve_multi_node"] = outcome(lambda: fusion._resolve_backend("auto", is_multi_node=True))
for name, facts in (("sm90", SM90), ("sm100", SM100)):
    with rc.override_platform(**facts):
        out[f"fusion_resolve_{name}"] = {b: outcome(lambda b=b: fusion._resolve_backend(b)) for b in ("auto", "trtllm")}

# ---- G4: the fused all-reduce + add + RMSNorm gate, whose arch flags are computed at import. Import it as the CPU
# sees it (no CUDA, so no sgl_kernel imports), then re-run only its module body with CUDA present.
# Stand-in: a CUDA device "exists" (torch.cuda.is_available), so the import-time flags see CUDA + flashinfer.
import sglang.srt.layers.layer_boundary.residual.add_norm as add_norm  # noqa: E402
import sglang.srt.utils as sglang_utils  # noqa: E402

torch.cuda.is_available = lambda: True
for probe in (sglang_utils.is_cuda, sglang_utils.is_flashinfer_available):
    getattr(probe, "cache_clear", lambda: None)()
add_norm = importlib.reload(add_norm)
out["add_norm_fusion_applies"] = {str(n): add_norm.flashinfer_ar_fusion_applies(n) for n in (1, 16, 2048, 2049)}


# ---- workspace preflight sizes. Stand-in for cuda.bindings.driver: 2 MiB allocation granularity, and a device
# whose multicast queries fail unless it reports multicast support.
class _Enum:
    def __getattr__(self, name: str) -> str:
        return name


def fake_driver(multicast: bool) -> types.SimpleNamespace:
    ok, unsupported = "CUDA_SUCCESS", "CUDA_ERROR_NOT_SUPPORTED"
    return types.SimpleNamespace(
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=ok),
        CUdevice_attribute=_Enum(),
        CUmemAllocationGranularity_flags=_Enum(),
        CUmulticastGranularity_flags=_Enum(),
        CUmulticastObjectProp=types.SimpleNamespace,
        cuDeviceGetAttribute=lambda attr, dev: (ok, 1 if multicast else 0),
        cuMemGetAllocationGranularity=lambda prop, flag: (ok, 2 << 20),
        cuMulticastGetGranularity=lambda prop, flag: (ok, 512 << 20) if multicast else (unsupported, 0),
    )


prop = types.SimpleNamespace(requestedHandleTypes="POSIX_FD", location=types.SimpleNamespace(id=0))
out["preflight_sizes"] = {
    name: outcome(
        lambda m=m: fusion._flashinfer_trtllm_workspace_allocation_sizes(
            fake_driver(m), prop, 8, 2048, 7168, torch.bfloat16
        )
    )
    for name, m in (("no_multicast", False), ("multicast", True))
}

# ---- S1/S2: torch symmetric memory. Stand-ins: capability (12, 0), world size 8, a CPU buffer for the symmetric
# allocation, a rendezvous handle without multicast (PCIe), and recorders in place of the CUDA kernels.
import sglang.srt.distributed.device_communicators.all_reduce_utils as ar_utils  # noqa: E402
import sglang.srt.distributed.device_communicators.torch_symm_mem as tsm  # noqa: E402

out["symm_mem_sizes_12"] = ar_utils.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(12)
kernels: list[str] = []
torch.cuda.set_device = lambda device: None
torch.cuda.get_device_capability = lambda device=None: (12, 0)
tsm.torch_symm_mem_available = True
tsm.dist.get_world_size = lambda group=None: 8
tsm.torch_symm_mem.empty = lambda numel, device, dtype: torch.zeros(numel, dtype=dtype)
tsm.torch_symm_mem.rendezvous = lambda buffer, group_name: types.SimpleNamespace(multicast_ptr=0)


class _TorchWithRecordedKernels:
    """torch, except that torch.ops.symm_mem's all-reduce kernels only record which one was called."""

    ops = types.SimpleNamespace(
        symm_mem=types.SimpleNamespace(
            multimem_all_reduce_=lambda buf, op, group: kernels.append("multimem"),
            two_shot_all_reduce_=lambda buf, op, group: kernels.append("two_shot"),
        )
    )

    def __getattr__(self, name: str):
        return getattr(torch, name)


tsm.torch = _TorchWithRecordedKernels()
group = types.SimpleNamespace(group_name="tp")


def communicator() -> dict:
    comm = tsm.TorchSymmMemCommunicator(group, torch.device("cpu"))
    result = {"disabled": comm.disabled, "max_size": comm.max_size}
    if not comm.disabled:
        comm.all_reduce(torch.ones(4096, dtype=torch.bfloat16))
        result["kernel"] = kernels[-1] if kernels else None
    return result


out["symm_mem"] = communicator()
# S2 alone: give capability 12 a size entry in this copy's table, so only the multicast requirement decides.
ar_utils.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.setdefault(12, {8: 128 << 20})
out["symm_mem_with_size_entry"] = communicator()
print(json.dumps(out))
