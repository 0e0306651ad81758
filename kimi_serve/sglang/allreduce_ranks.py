"""``python -m kimi_serve.sglang.allreduce_ranks --rank R --world-size N --init-method URL --plan JSON``: one rank of
the collective self-test (docs/up.md "The collective self-test"), run in the ENGINE interpreter, one process per rank
(kimi_serve/host/allreduce_selftest.py starts them, no torchrun, and reads what they print).

Each rank joins ``torch.distributed`` (NCCL; gloo where the plan says so, for the CPU tests) at ``--init-method``, then
for every message size of the plan builds every rank's input from a seed (values k + 0.5, k in [-8, 7]: every sum of
up to eight is exact in bf16, so any correct all-reduce gives exactly the same tensor), all-reduces its own with NCCL
and with each enabled path of SGLang's (FlashInfer's all-reduce fusion workspace, TorchSymmMemCommunicator,
PcieIpcCommunicator) and compares each with the exact sum.

It prints one line per event, ``KIMI-SELFTEST {json}``: ``ready``, ``unavailable`` (no torch, fewer devices than
ranks: nothing tested), ``setup`` (a path not engaged here, and why: SGLang would fall back to NCCL too), ``start``
before each reduction (a hang names its path and size), ``result`` (``taken``, ``max_err``, ``ok``) and ``done``.
Only the standard library and torch are imported at module level; SGLang only inside the paths' setups.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MARK = "KIMI-SELFTEST "
Reduce = Callable[[Any], Any]  # a tensor in, the all-reduced tensor out, or None: this path does not take that size
Setup = Callable[["Context"], Reduce]


class NotEngaged(Exception):
    """This path does not engage on this host or world size (SGLang would use NCCL instead); the reason."""


@dataclass
class Context:
    rank: int
    world_size: int
    backend: str
    device: Any  # torch.device
    device_group: Any
    cpu_group: Any
    plan: dict[str, Any]


def emit(event: str, **fields: Any) -> None:
    print(MARK + json.dumps({"event": event, **fields}), flush=True)


# ------------------------------------------------------------------------------------------------------ the paths


def _engaged(ctx: Context, comm: Any, should: Callable[[Any], bool], run: Reduce) -> Reduce:
    """``comm``'s all-reduce for the sizes it takes (None for the others), unless it disabled itself here."""
    if comm.disabled:
        name = type(comm).__name__
        raise NotEngaged(f"SGLang's {name} disabled itself here (world size {ctx.world_size}, {ctx.device})")
    return lambda x: run(x) if should(x) else None


def _pcie_ipc(ctx: Context) -> Reduce:
    from sglang.srt.distributed.device_communicators.pcie_ipc_ar import PcieIpcCommunicator

    comm = PcieIpcCommunicator(group=ctx.device_group, device=ctx.device, cpu_group=ctx.cpu_group)
    return _engaged(ctx, comm, comm.should_pcie_ipc_ar, comm.pcie_ipc_all_reduce)


def _torch_symm_mem(ctx: Context) -> Reduce:
    from sglang.srt.distributed.device_communicators.torch_symm_mem import TorchSymmMemCommunicator

    comm = TorchSymmMemCommunicator(group=ctx.cpu_group, device=ctx.device)
    return _engaged(ctx, comm, comm.should_torch_symm_mem_allreduce, comm.all_reduce)


def _flashinfer_fusion(ctx: Context) -> Reduce:
    """FlashInfer's kAllReduce on SGLang's own workspace, as parallel_state.py takes it before any other path."""
    from sglang.srt import runtime_context
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.distributed.parallel_state import get_tp_group
    from sglang.srt.layers import flashinfer_comm_fusion as fusion

    init_distributed_environment(world_size=ctx.world_size, rank=ctx.rank, local_rank=ctx.rank, backend="nccl")
    # SGLang 0.5.23 reads the group widths from its runtime context (published by its launcher): TP = every rank
    widths = {"tp_size": ctx.world_size, "pp_size": 1, "moe_ep_size": 1, "moe_dp_size": 1, "attn_dp_size": 1,
              "attn_cp_size": 1, "attn_dcp_size": 1}  # fmt: skip
    known = runtime_context._parallel_fields()
    runtime_context.get_parallel().override_permanently(**{k: v for k, v in widths.items() if k in known})
    initialize_model_parallel()
    rows = max(r for _name, r, _c in ctx.plan["sizes"])
    hidden = ctx.plan["sizes"][0][2]
    import torch

    if not fusion.ensure_workspace_initialized(
        max_token_num=rows, hidden_dim=hidden, dtype=torch.bfloat16, use_attn_tp_group=False
    ):
        raise NotEngaged("SGLang created no FlashInfer all-reduce workspace here")
    group = get_tp_group()
    key = (group.device_group, group.cpu_group)

    def reduce(x: Any) -> Any:
        if not fusion.can_use_flashinfer_allreduce(
            x, use_attn_tp_group=False, expected_world_size=ctx.world_size, expected_group_key=key
        ):
            return None
        return fusion.flashinfer_allreduce(x, use_attn_tp_group=False)

    return reduce


PATHS: dict[str, Setup] = {
    "flashinfer_fusion": _flashinfer_fusion,
    "torch_symm_mem": _torch_symm_mem,
    "pcie_ipc": _pcie_ipc,
}


# ------------------------------------------------------------------------------------------------------ one rank


def rank_input(torch: Any, seed: int, rank: int, rows: int, cols: int, device: Any) -> Any:
    """Rank ``rank``'s input: k + 0.5, k in [-8, 7], exact in bf16 (so are all sums of up to 8 of them)."""
    gen = torch.Generator(device="cpu").manual_seed(seed * 1009 + rank)
    k = torch.randint(-8, 8, (rows, cols), generator=gen, dtype=torch.int16)
    return (k.to(torch.float32) + 0.5).to(torch.bfloat16).to(device)


def nccl_reduce(ctx: Context) -> Reduce:
    import torch
    import torch.distributed as dist

    def reduce(x: Any) -> Any:
        y = x.float() if ctx.backend == "gloo" else x.clone()  # gloo reduces no bf16
        dist.all_reduce(y, group=ctx.device_group)
        return y.to(torch.bfloat16)

    return reduce


def compare(torch: Any, got: Any, want: Any) -> float:
    return float((got.float() - want.float()).abs().max().item())


def run_rank(ctx: Context, paths: dict[str, Setup]) -> int:
    """Every size of ``ctx.plan`` through NCCL and each planned path; events on stdout; 0 when it ran to the end."""
    import torch

    tol = float(ctx.plan.get("atol", 0.0))
    reducers: dict[str, Reduce] = {"nccl": nccl_reduce(ctx)}
    for name in ctx.plan["paths"]:
        try:
            reducers[name] = paths[name](ctx)
        except NotEngaged as exc:
            emit("setup", path=name, engaged=False, reason=str(exc))
        except Exception as exc:  # noqa: BLE001 - a path SGLang cannot set up is reported, never a crash
            emit("setup", path=name, engaged=False, error=True, reason=f"{type(exc).__name__}: {exc}"[:400])
        else:
            emit("setup", path=name, engaged=True)
    for i, (size, rows, cols) in enumerate(ctx.plan["sizes"]):
        seed = int(ctx.plan.get("seed", 1)) + i
        mine = rank_input(torch, seed, ctx.rank, rows, cols, ctx.device)
        exact = sum(rank_input(torch, seed, r, rows, cols, "cpu").float() for r in range(ctx.world_size))
        for name, reduce in reducers.items():
            emit("start", path=name, size=size)
            out = reduce(mine.clone())
            if out is None:
                emit("result", path=name, size=size, taken=False, ok=True)
                continue
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)
            err = compare(torch, out.cpu(), exact)
            emit("result", path=name, size=size, taken=True, ok=err <= tol, max_err=err)
    emit("done", rank=ctx.rank)
    return 0


def context(rank: int, world_size: int, init_method: str, plan: dict[str, Any]) -> Context | None:
    """Join the rendezvous; None (after an ``unavailable`` event) where this interpreter cannot run the plan."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        emit("unavailable", reason=f"no torch in this interpreter ({exc})")
        return None
    backend = plan.get("backend", "nccl")
    if backend == "nccl":
        if not torch.cuda.is_available() or torch.cuda.device_count() < world_size:
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            emit("unavailable", reason=f"torch sees {count} CUDA device(s), the plan needs {world_size}")
            return None
        device = torch.device(f"cuda:{rank}")
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
    world = dist.group.WORLD
    cpu_group = dist.new_group(backend="gloo") if backend == "nccl" else world
    emit("ready", rank=rank, device=str(device), torch=torch.__version__)
    return Context(rank, world_size, backend, device, world, cpu_group, plan)


def main(argv: Sequence[str] | None = None, paths: dict[str, Setup] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kimi_serve.sglang.allreduce_ranks")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--init-method", required=True)
    parser.add_argument("--plan", required=True, help="the plan as JSON (host/allreduce_selftest.py)")
    args = parser.parse_args(argv)
    ctx = context(args.rank, args.world_size, args.init_method, json.loads(args.plan))
    if ctx is None:
        return 0
    try:
        return run_rank(ctx, PATHS if paths is None else paths)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
