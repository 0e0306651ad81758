"""`engine install`'s last step on a GPU host: warm the JIT caches the unit starts with (CUDA's PTX cache, Triton's
and tvm-ffi's builds of their runtime pieces) through the engine's own interpreter and toolchain
(:mod:`kimi_serve.sglang.toolchain`), so a broken toolchain shows at install time. Skipped, with a line that says so,
where no GPU is present. Each step of :data:`WARM` prints one JSON line (``{"step", "ok", "seconds", "error"}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core import proc
from kimi_serve.core.proc import Completed, python_argv
from kimi_serve.core.report import json_meta
from kimi_serve.core.settings import process_environ
from kimi_serve.sglang.toolchain import SYSTEMD_PATH, cache_env, toolchain_env

WARM_TIMEOUT_S = 1200
RunWarm = Callable[[list[str], dict[str, str]], Completed | None]

WARM = r"""
import json, time

def step(name, body):
    t = time.monotonic()
    try:
        body()
        out = {"step": name, "ok": True}
    except Exception as exc:
        out = {"step": name, "ok": False, "error": (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]}
    out["seconds"] = round(time.monotonic() - t, 1)
    print(json.dumps(out), flush=True)

def cuda():
    import torch
    torch.cuda.init()
    (torch.ones(1024, device="cuda") * 2).sum().item()

def triton_kernel():
    import torch, triton, triton.language as tl

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

    x = torch.ones(4096, device="cuda")
    out = torch.empty_like(x)
    add[(4,)](x, x, out, 4096, BLOCK=1024)
    assert out.sum().item() == 8192

def nvcc_kernel():
    import torch
    from tvm_ffi import cpp

    source = '''
    __global__ void twice(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
    void run(tvm::ffi::TensorView x) { twice<<<(x.size(0) + 255) / 256, 256>>>((float*)x.data_ptr(), x.size(0)); }
    '''
    mod = cpp.load_inline(name="kimi_serve_warm", cuda_sources=source, functions=["run"])
    x = torch.ones(512, device="cuda")
    mod.run(x)
    torch.cuda.synchronize()
    assert x.sum().item() == 1024

for name, body in (("cuda", cuda), ("triton", triton_kernel), ("nvcc", nvcc_kernel)):
    step(name, body)
"""
STEPS = ("cuda", "triton", "nvcc")


@dataclass(frozen=True)
class WarmPlan:
    run: bool
    why: str  # why it runs or not, one line
    argv: list[str] = field(default_factory=list, metadata=json_meta(encode=lambda a: a[:3]))
    env: dict[str, str] = field(default_factory=dict)


def warm_plan(prefix: Path, pins: dict[str, str], gpus: int, cache_root: str, environ: dict[str, str]) -> WarmPlan:
    """The warm step for the engine at ``prefix`` installed from a lock with ``pins`` (name -> version) on a host
    with ``gpus`` GPUs (nvidia-smi's count), its caches in ``cache_root`` (the unit's CacheDirectory)."""
    if "nvidia-cuda-nvcc" not in pins:
        return WarmPlan(False, "the lock installs no CUDA toolchain (nvidia-cuda-nvcc): nothing to compile with")
    if gpus < 1:
        return WarmPlan(False, "no GPU here (nvidia-smi lists none): the JIT caches fill at the first start")
    python = str(prefix / "bin" / "python")
    env = {"PATH": environ.get("PATH") or SYSTEMD_PATH, **cache_env(cache_root)}
    env.update(toolchain_env(python, env))
    why = f"{gpus} GPU(s): warm CUDA, Triton and nvcc (tvm-ffi) into {cache_root}"
    return WarmPlan(True, why, python_argv(python, "-c", WARM), env)


def parse(res: Completed) -> list[dict[str, Any]]:
    """The steps' JSON lines, in order."""
    found = []
    for line in res.out.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("step") in STEPS:
            found.append(item)
    return found


def _run(argv: list[str], env: dict[str, str]) -> Completed | None:
    try:
        return proc.run(argv, timeout=WARM_TIMEOUT_S, env={**process_environ(), **env})
    except proc.NotInstalled:
        return None


def run_warm(plan: WarmPlan, runner: RunWarm = _run) -> list[str]:
    """Run the warm step (``runner``: core/proc.py's, or a stand-in) and say how it went, one line per step; a
    failure is reported, never raised (the engine is installed either way; `doctor` names toolchain problems)."""
    if not plan.run:
        return [f"warm caches: skipped: {plan.why}"]
    res = runner(plan.argv, plan.env)
    if res is None:
        return ["warm caches: the engine's interpreter did not run"]
    steps = parse(res)
    lines = [
        f"warm caches: {s['step']}: ok ({s.get('seconds', 0)} s)"
        if s.get("ok")
        else f"warm caches: {s['step']}: FAILED: {s.get('error', '?')} (fix: kimi-serve doctor names the toolchain)"
        for s in steps
    ]
    missing = [name for name in STEPS if name not in {s["step"] for s in steps}]
    if missing:
        lines.append(f"warm caches: {', '.join(missing)} did not report ({res.describe()})")
    return lines


def host_warm_plan(prefix: Path, pins: dict[str, str], cache_root: str, environ: dict[str, str]) -> WarmPlan:
    """The warm step for this host: its GPUs as nvidia-smi lists them (asked only for a lock with a toolchain), the
    unit's cache folder (``cache_root``)."""
    from kimi_serve.host.doctor import Host
    from kimi_serve.host.gpus import read_gpus

    gpus = read_gpus(Host.real().run)[0] if "nvidia-cuda-nvcc" in pins else []
    return warm_plan(prefix, pins, len(gpus), cache_root, environ)
