"""The collective self-test (docs/up.md "The collective self-test") up to the hardware: the plan from each profile's
flags, the ranks as real processes over the same process protocol (a STAND-IN engine interpreter that prints agreeing,
disagreeing, hanging or crashing results: this machine has no GPU), the deadline (a hung rank killed, named by its path
and size), the findings, the refusal in `up`'s preflight and `doctor`, and, in the sglang tier, the real rank module
over torch.distributed's gloo backend with a deliberately wrong path."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding
from kimi_serve.core.resources import package_root
from kimi_serve.host import allreduce_selftest as st
from kimi_serve.host.doctor import Host, run_doctor, uses_gpus
from kimi_serve.host.preflight import preflight
from kimi_serve.process.ranks import run_ranks
from kimi_serve.profile.deployment import deployment_of
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.member_units import render_members
from kimi_serve.service.timeouts import START_SLACK_SEC, start_timeout_sec
from kimi_serve.service.unit import UnitContext, render_unit
from kimi_serve.up.selftest import selftest
from tests.test_doctor import gpu_rows, model_dir, sglang_site, smi, stand_in_gpu_host, unlimited

STANDIN = """\
import json, os, sys, time
args = sys.argv[sys.argv.index("--rank"):]
rank, world = int(args[1]), int(args[3])
plan = json.loads(args[args.index("--plan") + 1])
open(os.path.join(PIDS, f"rank{rank}.pid"), "w").write(str(os.getpid()))
def emit(event, **f):
    print("KIMI-SELFTEST " + json.dumps({"event": event, **f}), flush=True)
emit("ready", rank=rank, device=f"cuda:{rank}")
for name in plan["paths"]:
    emit("setup", path=name, engaged=name != IDLE, reason="disabled itself at world size %d" % world)
for size, rows, cols in plan["sizes"]:
    for path in ["nccl", *[p for p in plan["paths"] if p != IDLE]]:
        emit("start", path=path, size=size)
        if (path, rows) == HANG and rank == 1:
            time.sleep(3600)
        if (path, rows) == CRASH and rank == 1:
            print("Traceback: CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
            sys.exit(3)
        bad = (path, rows) == WRONG
        emit("result", path=path, size=size, taken=True, ok=not bad, max_err=1.0 if bad else 0.0)
emit("done", rank=rank)
"""


def standin(tmp_path: Path, *, wrong: object = None, hang: object = None, crash: object = None, idle: str = "") -> str:
    """An executable that answers ``python -P -m kimi_serve.sglang.allreduce_ranks ...`` over the ranks' protocol."""
    pids = tmp_path / "pids"
    pids.mkdir(exist_ok=True)
    script = tmp_path / "engine-python"
    head = f"#!{sys.executable}\nPIDS, IDLE = {str(pids)!r}, {idle!r}\nWRONG, HANG, CRASH = {wrong!r}, {hang!r}, {crash!r}\n"
    script.write_text(head + STANDIN)
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def gpu_profile(write_profile: Callable[..., Path]) -> Callable[..., str]:
    def make(python: str, extra: str = "", base: str = "prod") -> str:
        return str(write_profile(f"extends: {base}\npython: {python}\n" + textwrap.dedent(extra)))

    return make


def run(profile: str, deadline_s: float = 20.0) -> list[Finding]:
    p = load_profile(profile)
    return selftest(p, validated_launch(p), deadline_s)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][0] != "Z"


# ------------------------------------------------------------------------------------------------------ the plan


def test_prod_plans_its_three_paths_at_tp8_decode_and_prefill_sizes() -> None:
    plan = st.plan_for(load_profile("prod"), True)
    assert isinstance(plan, st.SelftestPlan)
    assert plan.world_size == 8
    assert plan.paths == ("flashinfer_fusion", "torch_symm_mem", "pcie_ipc")
    assert [(rows, cols) for _n, rows, cols in plan.sizes] == [(1, 7168), (8, 7168), (32, 7168), (8192, 7168)]
    assert plan.deadline_s > 0 and plan.atol == 0.0 and plan.backend == "nccl"


@pytest.mark.parametrize(
    ("name", "sets", "paths"),
    [
        ("prod-ipc", [], ("pcie_ipc",)),
        ("baseline", [], ("flashinfer_fusion", "torch_symm_mem", "pcie_ipc")),
        ("prod", ["allreduce.torch_symm_mem=false"], ("flashinfer_fusion", "pcie_ipc")),
        ("prod", ["allreduce.pcie_ipc=false", "allreduce.flashinfer_fusion_backend=null"], ("torch_symm_mem",)),
        ("prod-ipc", ["allreduce.pcie_ipc=false", "env.SGLANG_ENABLE_PCIE_IPC_ALLREDUCE='1'"], ("pcie_ipc",)),
        ("prod-ipc", ["allreduce.pcie_ipc=false"], ()),
    ],
)
def test_the_paths_follow_the_profile_flags(name: str, sets: list[str], paths: tuple[str, ...]) -> None:
    plan = st.plan_for(load_profile(name, sets), True)
    assert isinstance(plan, st.SelftestPlan) and plan.paths == paths


@pytest.mark.parametrize(
    ("name", "why"),
    [("sim", "engine: simulator"), ("sim-dp2", "engine: simulator"), ("prod-tp16", "nodes.count 2")],
)
def test_profiles_without_a_single_node_gpu_start_have_no_plan(name: str, why: str) -> None:
    p = load_profile(name)
    plan = st.plan_for(p, uses_gpus(p))
    assert isinstance(plan, str) and plan.startswith(why)


def test_a_cpu_device_start_has_no_plan() -> None:
    p = load_profile("prod", ["extra_args=[--device, cpu]"])
    assert st.plan_for(p, uses_gpus(p)) == "--device cpu: not a CUDA start"


def test_rank_argv_runs_the_rank_module_in_the_engine_interpreter() -> None:
    plan = st.SelftestPlan(2, ("pcie_ipc",), (("x", 1, 8),))
    argv = st.rank_argv("/opt/venv/bin/python", plan)(1, "file:///tmp/r")
    assert argv[:4] == ["/opt/venv/bin/python", "-P", "-m", "kimi_serve.sglang.allreduce_ranks"]
    assert argv[argv.index("--rank") + 1] == "1" and argv[argv.index("--world-size") + 1] == "2"
    assert json.loads(argv[argv.index("--plan") + 1])["paths"] == ["pcie_ipc"]


# ------------------------------------------------------------------------------------------------------ the run


def test_agreeing_paths_pass_with_one_line(tmp_path: Path, gpu_profile: Callable[..., str]) -> None:
    found = run(gpu_profile(standin(tmp_path, idle="torch_symm_mem")))
    assert [f.status for f in found] == [PASS]
    assert "4 sizes at TP 8 agree with the exact sum" in found[0].message
    assert "FlashInfer all-reduce fusion, SGLang's PCIe-IPC all-reduce" in found[0].message
    assert "torch symmetric memory not engaged (disabled itself at world size 8)" in found[0].message


@pytest.mark.parametrize(
    ("path", "label", "fix"),
    [
        ("torch_symm_mem", "torch symmetric memory", "--set allreduce.torch_symm_mem=false"),
        ("flashinfer_fusion", "FlashInfer all-reduce fusion", "--set allreduce.flashinfer_fusion_backend=null"),
        ("pcie_ipc", "SGLang's PCIe-IPC all-reduce", "--set allreduce.pcie_ipc=false"),
    ],
)
def test_a_path_that_disagrees_fails_naming_the_path_and_the_change(
    tmp_path: Path, gpu_profile: Callable[..., str], path: str, label: str, fix: str
) -> None:
    found = run(gpu_profile(standin(tmp_path, wrong=(path, 8192))))
    assert [f.status for f in found] == [FAIL]
    assert found[0].message.startswith(f"{label} disagrees with the exact sum at TP 8, prefill chunk (8192x7168)")
    assert "max error 1.0" in found[0].message
    assert fix in found[0].fix and "--profile prod-ipc" in found[0].fix


def test_nccl_itself_disagreeing_fails_too(tmp_path: Path, gpu_profile: Callable[..., str]) -> None:
    found = run(gpu_profile(standin(tmp_path, wrong=("nccl", 1))))
    assert [f.status for f in found] == [FAIL] and found[0].message.startswith("NCCL disagrees")


def test_a_hanging_path_is_killed_at_the_deadline_and_named(tmp_path: Path, gpu_profile: Callable[..., str]) -> None:
    start = time.monotonic()
    found = run(gpu_profile(standin(tmp_path, hang=("torch_symm_mem", 32))), deadline_s=4.0)
    took = time.monotonic() - start
    assert took < 4.0 + 15  # the deadline, the stop's grace, the processes' start on a busy machine
    assert [f.status for f in found] == [FAIL]
    assert found[0].message.startswith(
        "torch symmetric memory hung at TP 8, decode bs32 (32x7168): no answer within 4s"
    )
    assert "--set allreduce.torch_symm_mem=false" in found[0].fix
    pids = [int(p.read_text()) for p in (tmp_path / "pids").glob("*.pid")]
    assert len(pids) == 8 and not any(alive(pid) for pid in pids)  # every rank stopped, none left behind


def test_a_rank_that_crashes_fails_with_its_last_line(tmp_path: Path, gpu_profile: Callable[..., str]) -> None:
    found = run(gpu_profile(standin(tmp_path, crash=("pcie_ipc", 1))))
    assert [f.status for f in found] == [FAIL]
    assert found[0].message == (
        "rank 1 of the self-test exited 3 before the end: "
        "Traceback: CUDA error: an illegal memory access was encountered"
    )


def test_ranks_that_never_join_are_a_hang_before_any_path(tmp_path: Path) -> None:
    sleeper = tmp_path / "sleeper"
    sleeper.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(3600)\n")
    sleeper.chmod(0o755)
    plan = st.SelftestPlan(2, ("pcie_ipc",), (("x", 1, 8),), deadline_s=2.0)
    ran = run_ranks(2, st.rank_argv(str(sleeper), plan), dict(os.environ), plan.deadline_s, st.is_event)
    assert ran.hung and all(r.ran_out for r in ran.ranks)
    found = st.findings(
        st.SelftestReport(plan, [st.rank_log(r.lines, r.status, r.tail) for r in ran.ranks], ran.hung, ran.wall_s)
    )
    assert [f.status for f in found] == [FAIL]
    assert found[0].message == "the ranks did not join at TP 2 within 2s: killed"


def test_an_engine_without_torch_or_gpus_is_a_warning_not_a_pass(
    tmp_path: Path, gpu_profile: Callable[..., str]
) -> None:
    # the real rank module in an interpreter without torch (kimi-serve's own): nothing was tested, and it says so
    found = run(gpu_profile(sys.executable))
    assert [f.status for f in found] == [WARN]
    assert found[0].message.startswith("not run at TP 8: no torch in this interpreter")


# ------------------------------------------------------------------------------------------------------ the wiring


def _gpu_host_profile(tmp_path: Path, write_profile: Callable[..., Path], python: str, port: int) -> str:
    """prod-ipc on a stand-in 8-GPU host: model and draft folders the test made, no patch set (the fake SGLang)."""
    model, draft = (
        model_dir(tmp_path / "Kimi-K2.5"),
        model_dir(tmp_path / "draft", shards=1, present=1, tokenizer=False),
    )
    return str(
        write_profile(f"""\
        extends: prod-ipc
        python: {python}
        patch_set: null
        allreduce: {{flashinfer_fusion_backend: null, torch_symm_mem: false}}
        model: {{path: {model}}}
        speculative: {{draft_model_path: {draft}}}
        server: {{port: {port}, host: 127.0.0.1, api_key_file: null}}
        """)
    )


def _stand_in_host(tmp_path: Path, deadline_s: float = 20.0) -> Host:
    root = stand_in_gpu_host(tmp_path / "gpu-host")
    return Host(
        fs_root=root,
        dev_root=root / "dev",
        environ={"PATH": "/usr/bin:/bin"},
        run=smi(gpu_rows()),
        sglang_site=sglang_site(tmp_path),
        rlimit=unlimited,
        coldstart_probe="never",
        allreduce_selftest=lambda prof, launch: selftest(prof, launch, deadline_s),
    )


def test_up_preflight_refuses_a_disagreeing_path_with_exit_5(
    tmp_path: Path, write_profile: Callable[..., Path], loopback_port: Callable[[], int]
) -> None:
    profile = _gpu_host_profile(tmp_path, write_profile, standin(tmp_path, wrong=("pcie_ipc", 8)), loopback_port())
    p = load_profile(profile)
    said: list[str] = []
    with pytest.raises(KimiServeError) as exc:
        preflight(p, validated_launch(p), said.append, _stand_in_host(tmp_path))
    assert exc.value.exit_code == ExitCode.ENVIRONMENT
    assert exc.value.message.startswith(
        "preflight: allreduce_selftest: SGLang's PCIe-IPC all-reduce disagrees with the exact sum at TP 8, decode bs8"
    )
    assert "--set allreduce.pcie_ipc=false" in str(exc.value.hint)
    assert any(line.startswith("preflight fail: allreduce_selftest: ") for line in said)


def test_doctor_passes_agreeing_paths_and_says_so(
    tmp_path: Path, write_profile: Callable[..., Path], loopback_port: Callable[[], int]
) -> None:
    profile = _gpu_host_profile(tmp_path, write_profile, standin(tmp_path), loopback_port())
    p = load_profile(profile)
    report = run_doctor(p, validated_launch(p), _stand_in_host(tmp_path), service=False)
    checks = {c.code: c for c in report.checks}
    assert report.exit_code == ExitCode.OK, [c for c in report.checks if c.status == FAIL]
    assert checks[st.CODE].status == PASS and "SGLang's PCIe-IPC all-reduce" in checks[st.CODE].message
    said: list[str] = []
    preflight(p, validated_launch(p), said.append, _stand_in_host(tmp_path))
    assert any(line.startswith("preflight pass: allreduce_selftest: 4 sizes at TP 8 agree") for line in said)


def test_doctor_does_not_run_it_after_a_failed_check(
    tmp_path: Path, write_profile: Callable[..., Path], loopback_port: Callable[[], int]
) -> None:
    profile = _gpu_host_profile(tmp_path, write_profile, standin(tmp_path), loopback_port())
    p = load_profile(profile)
    host = _stand_in_host(tmp_path)
    host.run = smi(None)  # no nvidia-smi: the gpus check fails first
    checks = {c.code: c for c in run_doctor(p, validated_launch(p), host, service=False).checks}
    assert (checks[st.CODE].status, checks[st.CODE].message) == (SKIP, "not run: gpus failed")
    assert not list((tmp_path / "pids").glob("*.pid"))  # no rank was started


def test_doctor_and_preflight_carry_the_self_test_finding() -> None:
    # the GPU host's answer, injected where doctor asks it: the failure is the preflight's refusal, exit 5
    from kimi_serve.host import doctor

    p = load_profile("prod-ipc", ["server.api_key_file=null", "server.host=127.0.0.1", "server.port=1"])
    bad = Finding(
        "doctor", st.CODE, FAIL, "SGLang's PCIe-IPC all-reduce hung at TP 8, decode bs1 (1x7168)", st._fix("pcie_ipc")
    )
    assert doctor._selftest(p, validated_launch(p), Host(allreduce_selftest=lambda *_: [bad]), []) == [bad]
    skipped = doctor._selftest(p, validated_launch(p), Host(), [])
    assert [(f.status, f.message) for f in skipped] == [(SKIP, "not run by this caller")]


def test_up_dry_run_of_a_simulator_profile_says_it_skips(
    cli: Callable[..., Any], loopback_port: Callable[[], int]
) -> None:
    result = cli("up", "--profile", "sim", "--dry-run", "--set", f"server.port={loopback_port()}")
    assert "preflight skip: allreduce_selftest: engine: simulator: no GPU all-reduce to test" in result.out, result.out


# ------------------------------------------------------------------------------------------------------ the unit's gate

KIMI = str(Path(sys.executable).parent / "kimi-serve")


def _unit_lines(profile: str, sets: list[str] | None = None) -> list[str]:
    p = load_profile(profile, sets or [])
    ctx = UnitContext(kimi_serve=KIMI, package_root=str(package_root()))
    return render_unit(p, validated_launch(p), ctx).text.splitlines()


def _gate(lines: list[str]) -> list[str] | None:
    """The selftest-gate ExecStartPre of a unit, as the argv systemd runs (None when the unit has none)."""
    found = [line for line in lines if line.startswith("ExecStartPre=") and '"selftest-gate"' in line]
    assert len(found) <= 1
    return shlex.split(found[0].removeprefix("ExecStartPre=")) if found else None


@pytest.mark.parametrize(
    ("name", "sets", "paths"),
    [
        ("prod", [], ["flashinfer_fusion", "torch_symm_mem", "pcie_ipc"]),
        ("baseline", [], ["flashinfer_fusion", "torch_symm_mem", "pcie_ipc"]),
        ("prod-ipc", [], ["pcie_ipc"]),
        ("prod", ["allreduce.torch_symm_mem=false"], ["flashinfer_fusion", "pcie_ipc"]),
    ],
)
def test_a_planned_profiles_unit_runs_the_gate_before_sglang(name: str, sets: list[str], paths: list[str]) -> None:
    lines = _unit_lines(name, sets)
    gate = _gate(lines)
    assert gate is not None and gate[:2] == [KIMI, "selftest-gate"]
    assert gate[gate.index("--python") + 1] == "/opt/kimi-serve/venv/bin/python"  # the ExecStart's interpreter
    assert gate[gate.index("--tp-size") + 1] == "8" and gate[gate.index("--deadline") + 1] == "300"
    assert [gate[i + 1] for i, a in enumerate(gate) if a == "--path"] == paths
    pres = [i for i, line in enumerate(lines) if line.startswith("ExecStartPre=")]
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    assert 'nvidia-modprobe"' in lines[pres[0]] and "selftest-gate" in lines[pres[-1]] and pres[-1] < start
    assert not lines[pres[-1]].startswith(("ExecStartPre=-", "ExecStartPre=+"))  # its failure fails the start
    # systemd's start deadline covers the self-test's (300 s + its stop) on top of the cold start and the contract
    p = load_profile(name, sets)
    assert f"TimeoutStartSec={start_timeout_sec(p)}" in lines
    assert start_timeout_sec(p) >= st.DEADLINE_S + p.startup.timeout + p.verify.timeout


@pytest.mark.parametrize(
    ("name", "sets"),
    [("sim", []), ("sim-dp2", []), ("prod-tp16", []), ("prod", ["extra_args=[--device, cpu]"])],
)
def test_a_profile_without_a_plan_has_no_gate_and_no_extra_deadline(name: str, sets: list[str]) -> None:
    lines = _unit_lines(name, sets)
    assert _gate(lines) is None and not any("self-test" in line for line in lines)
    p = load_profile(name, sets)
    assert start_timeout_sec(p) == p.startup.timeout + int(p.verify.timeout) + START_SLACK_SEC


def test_the_router_unit_of_a_replicated_gpu_profile_has_no_gate() -> None:
    # prod-dp2's replicas are other boxes (each runs prod, gated); this host's one unit is the router: no GPU
    p = load_profile("prod-dp2")
    ctx = UnitContext(kimi_serve=KIMI, package_root=str(package_root()))
    units = render_members(
        deployment_of(p, validated_launch(p), pythonpath=ctx.package_root), ctx, "sglang-kimi.service"
    )
    assert [u.name for u in units.values()] == ["sglang-kimi-router.service"]
    assert _gate(next(iter(units.values())).text.splitlines()) is None


def _run_gate(tmp_path: Path, engine: str, deadline: str = "20") -> subprocess.CompletedProcess[str]:
    """The gate exactly as prod's unit names it, with the stand-in engine as the profile's interpreter."""
    p = load_profile(str(_write(tmp_path, engine)))
    gate = _gate(render_unit(p, validated_launch(p), UnitContext(kimi_serve=KIMI, package_root="/x")).text.split("\n"))
    assert gate is not None
    gate[gate.index("--deadline") + 1] = deadline
    return subprocess.run(gate, capture_output=True, text=True, timeout=120, check=False)


def _write(tmp_path: Path, engine: str) -> Path:
    path = tmp_path / "gated.yaml"
    path.write_text(f"extends: prod\npython: {engine}\n")
    return path


def test_the_gate_passes_agreeing_paths_with_exit_0(tmp_path: Path) -> None:
    done = _run_gate(tmp_path, standin(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        next(line for line in done.stdout.splitlines() if line.startswith("pass allreduce_selftest: 4 sizes at TP 8"))
    ]


@pytest.mark.parametrize(
    ("path", "label"), [("torch_symm_mem", "torch symmetric memory"), ("pcie_ipc", "SGLang's PCIe-IPC all-reduce")]
)
def test_the_gate_fails_the_start_naming_a_path_that_disagrees(tmp_path: Path, path: str, label: str) -> None:
    done = _run_gate(tmp_path, standin(tmp_path, wrong=(path, 8)))
    assert done.returncode == 1, done.stderr
    (line,) = done.stdout.splitlines()  # one line per finding: what the journal shows
    assert line.startswith(f"fail allreduce_selftest: {label} disagrees with the exact sum at TP 8, decode bs8")
    assert f"--set allreduce.{path}=false" in line and "--profile prod-ipc" in line
    assert "Traceback" not in done.stderr


def test_the_gate_fails_a_hang_at_its_deadline_and_leaves_no_rank(tmp_path: Path) -> None:
    began = time.monotonic()
    done = _run_gate(tmp_path, standin(tmp_path, hang=("flashinfer_fusion", 8192)), deadline="4")
    assert time.monotonic() - began < 4 + 30  # the deadline, the stop's grace, kimi-serve's start on a busy machine
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith(
        "fail allreduce_selftest: FlashInfer all-reduce fusion hung at TP 8, prefill chunk (8192x7168): "
        "no answer within 4s"
    )
    pids = [int(p.read_text()) for p in (tmp_path / "pids").glob("*.pid")]
    assert len(pids) == 8 and not any(alive(pid) for pid in pids)


def test_the_gate_exits_5_where_it_cannot_run(tmp_path: Path) -> None:
    no_torch = _run_gate(tmp_path, sys.executable)  # the real rank module, an interpreter without torch
    assert no_torch.returncode == 5 and no_torch.stdout.startswith("warn allreduce_selftest: not run at TP 8")
    missing = subprocess.run(
        [KIMI, "selftest-gate", "--python", str(tmp_path / "gone"), "--tp-size", "8"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 5 and "--python:" in missing.stderr and "Traceback" not in missing.stderr
    bad = subprocess.run(
        [KIMI, "selftest-gate", "--python", sys.executable, "--tp-size", "2", "--path", "nvls"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "--path: unknown all-reduce path 'nvls'" in bad.stderr


# ------------------------------------------------------------------------------------------------------ gloo, real torch

GLOO_PATHS = """\
import sys
import torch
import torch.distributed as dist
from kimi_serve.sglang import allreduce_ranks as ar

def agree(ctx):
    def reduce(x):
        y = x.float()
        dist.all_reduce(y, group=ctx.device_group)
        return y.to(torch.bfloat16)
    return reduce

def wrong(ctx):  # one rank's contribution counted twice in one row: what a racing signal pad would give
    def reduce(x):
        y = x.float()
        dist.all_reduce(y, group=ctx.device_group)
        if x.shape[0] > 1:
            y[1] += x[1].float()
        return y.to(torch.bfloat16)
    return reduce

def idle(ctx):
    raise ar.NotEngaged("no such communicator on CPU")

sys.exit(ar.main(sys.argv[sys.argv.index("--rank"):], {"pcie_ipc": agree, "torch_symm_mem": wrong, "flashinfer_fusion": idle}))
"""


def test_gloo_ranks_compare_each_path_with_the_exact_sum(sglang_python: str, tmp_path: Path) -> None:
    script = tmp_path / "gloo_paths.py"
    script.write_text(GLOO_PATHS)
    plan = st.SelftestPlan(
        2,
        ("flashinfer_fusion", "torch_symm_mem", "pcie_ipc"),
        (("decode bs1", 1, 7168), ("prefill", 64, 7168)),
        deadline_s=240.0,
        backend="gloo",
    )
    env = {**os.environ, "PYTHONPATH": str(package_root())}

    def argv(rank: int, init: str) -> list[str]:
        return [sglang_python, "-P", str(script), *st.rank_argv(sglang_python, plan)(rank, init)[4:]]

    ran = run_ranks(2, argv, env, plan.deadline_s, st.is_event)
    ranks = [st.rank_log(r.lines, r.status, r.tail) for r in ran.ranks]
    assert not ran.hung and all(r.done() for r in ranks), [r.tail for r in ranks]
    found = st.findings(st.SelftestReport(plan, ranks, ran.hung, ran.wall_s))
    assert [f.status for f in found] == [FAIL]
    assert found[0].message.startswith("torch symmetric memory disagrees with the exact sum at TP 2, prefill")
    results = {(e["path"], e["size"]): e for e in ranks[0].events if e["event"] == "result"}
    assert results[("nccl", "prefill")]["max_err"] == 0.0 and results[("pcie_ipc", "prefill")]["max_err"] == 0.0
    assert results[("torch_symm_mem", "decode bs1")]["ok"] and results[("torch_symm_mem", "prefill")]["max_err"] > 0
    assert {
        "event": "setup",
        "path": "flashinfer_fusion",
        "engaged": False,
        "reason": "no such communicator on CPU",
    } in ranks[0].events


def test_the_real_rank_module_sets_up_sglangs_own_paths_without_crashing(sglang_python: str) -> None:
    # SGLang 0.5.23's communicators, as the rank module builds them, on CPU (gloo): each declines or raises, the rank
    # reports why and still compares NCCL's stand-in with the exact sum to the end
    plan = st.SelftestPlan(2, ("flashinfer_fusion", "torch_symm_mem", "pcie_ipc"), (("decode bs1", 1, 7168),),
                           deadline_s=240.0, backend="gloo")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(package_root())}
    ran = run_ranks(2, st.rank_argv(sglang_python, plan), env, plan.deadline_s, st.is_event)
    ranks = [st.rank_log(r.lines, r.status, r.tail) for r in ran.ranks]
    assert not ran.hung and all(r.done() for r in ranks), [r.tail for r in ranks]
    setups = {e["path"]: e for e in ranks[0].events if e["event"] == "setup"}
    assert set(setups) == {"flashinfer_fusion", "torch_symm_mem", "pcie_ipc"}
    assert not any(e["engaged"] for e in setups.values())
    assert setups["pcie_ipc"]["reason"] == "SGLang's PcieIpcCommunicator disabled itself here (world size 2, cpu)"
    found = st.findings(st.SelftestReport(plan, ranks, ran.hung, ran.wall_s))
    assert [f.status for f in found] == [WARN]  # FlashInfer's setup raised (no GPU for NCCL): untested, said so
    assert "FlashInfer all-reduce fusion not engaged (ValueError" in found[0].message
