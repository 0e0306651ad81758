"""`engine install`'s warm step (engine/warm.py): where it runs (a lock with a toolchain, a GPU), with what (the
engine's own interpreter and nvcc, every cache in the unit's cache folder), and what it reports. The step itself needs
a GPU: here its script runs for real on an interpreter without torch (every step reports, none raises) and its
outcomes come from a stand-in runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_serve.core.proc import Completed
from kimi_serve.engine import locks
from kimi_serve.engine.warm import STEPS, WARM, WarmPlan, parse, run_warm, warm_plan
from kimi_serve.sglang.toolchain import CACHE_ENV

GPU_PINS = {name: pin.version for name, pin in locks.load("gpu").pins.items()}
CPU_PINS = {name: pin.version for name, pin in locks.load("cpu").pins.items()}


def _engine(root: Path) -> Path:
    nvcc = root / "lib" / "python3.11" / "site-packages" / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    (root / "pyvenv.cfg").write_text("version_info = 3.11.9\n")
    return root


def test_warm_runs_only_with_a_toolchain_and_a_gpu(tmp_path: Path) -> None:
    prefix = _engine(tmp_path / "engine")
    cpu = warm_plan(prefix, CPU_PINS, 8, "/var/cache/kimi-serve", {})
    assert not cpu.run and "installs no CUDA toolchain" in cpu.why
    none = warm_plan(prefix, GPU_PINS, 0, "/var/cache/kimi-serve", {})
    assert not none.run and none.why.startswith("no GPU here")
    assert run_warm(none, lambda argv, env: None) == [f"warm caches: skipped: {none.why}"]  # never runs


def test_warm_uses_the_engines_nvcc_and_the_units_cache_folder(tmp_path: Path) -> None:
    prefix = _engine(tmp_path / "engine")
    plan = warm_plan(prefix, GPU_PINS, 8, "/var/cache/kimi-serve", {"PATH": "/usr/bin:/bin"})
    assert plan.run and plan.argv == [str(prefix / "bin" / "python"), "-P", "-c", WARM]
    home = f"{prefix}/lib/python3.11/site-packages/nvidia/cu13"
    assert plan.env["CUDA_HOME"] == home and plan.env["PATH"] == f"{home}/bin:/usr/bin:/bin"
    for name, _sub in CACHE_ENV:  # the same table the unit's Environment= lines come from
        assert plan.env[name].startswith("/var/cache/kimi-serve"), name
    assert plan.env["SGLANG_JIT_CACHE_DIR"] == "/var/cache/kimi-serve/sglang/jit"


def _lines(*steps: dict[str, object]) -> Completed:
    return Completed(("python",), 0, "noise\n" + "\n".join(json.dumps(s) for s in steps) + "\n", "")


def test_warm_reports_each_step_and_never_raises(tmp_path: Path) -> None:
    plan = WarmPlan(True, "8 GPU(s)", ["/opt/e/bin/python", "-P", "-c", WARM], {})
    ok = [{"step": s, "ok": True, "seconds": 1.5} for s in STEPS]
    assert run_warm(plan, lambda argv, env: _lines(*ok)) == [f"warm caches: {s}: ok (1.5 s)" for s in STEPS]
    bad = [ok[0], {"step": "triton", "ok": False, "error": "RuntimeError: ptxas not found"}]
    lines = run_warm(plan, lambda argv, env: Completed(("python",), -9, _lines(*bad).out, "Killed"))
    assert (
        lines[1]
        == "warm caches: triton: FAILED: RuntimeError: ptxas not found (fix: kimi-serve doctor names the toolchain)"
    )
    assert lines[2].startswith("warm caches: nvcc did not report (") and "Killed" in lines[2]
    assert run_warm(plan, lambda argv, env: None) == ["warm caches: the engine's interpreter did not run"]


def test_the_warm_script_reports_every_step_even_when_each_fails() -> None:
    # a real interpreter without torch: each step fails on its import, every one still prints its line
    done = subprocess.run([sys.executable, "-P", "-c", WARM], capture_output=True, text=True, timeout=120, check=False)
    steps = parse(Completed(("python",), done.returncode, done.stdout, done.stderr))
    assert done.returncode == 0 and [s["step"] for s in steps] == list(STEPS), done
    assert all(s["ok"] is False and "ModuleNotFoundError" in s["error"] for s in steps)


def test_dry_run_says_whether_it_warms(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("engine", "install", "--prefix", str(tmp_path / "venv"), "--lock", "cpu", "--dry-run")
    assert r.code == 0 and "warm caches: skipped: the lock installs no CUDA toolchain" in r.out, r.err
    r = cli("engine", "install", "--prefix", str(tmp_path / "venv"), "--lock", "cpu", "--dry-run", "--json")
    assert json.loads(r.out)["warm"]["run"] is False


CACHE_PROBE = """
import json
from sglang.kernels.jit.utils.compile.cache import cache_root
from tvm_ffi import cpp
mod = cpp.load_inline(name="kimi_serve_cache_probe", cpp_sources="int twice(int x) { return 2 * x; }", functions=["twice"])
print(json.dumps({"jit": str(cache_root()), "twice": mod.twice(21)}))
"""


def test_the_real_engine_reads_the_cache_variables_the_unit_sets(sglang_python: str, tmp_path: Path) -> None:
    """SGLang 0.5.23's JIT cache root and a real tvm-ffi build (the host's c++) land in the folder the unit's table
    names, nothing in $HOME: the variable names are the ones the engine reads."""
    from kimi_serve.sglang.toolchain import cache_env

    if not any(Path(d, "c++").exists() for d in ("/usr/bin", "/usr/local/bin")):
        pytest.skip("no host C++ compiler here (tvm-ffi builds with c++)")
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), **cache_env(str(cache))}
    done = subprocess.run(
        [sglang_python, "-P", "-c", CACHE_PROBE], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"jit": str(cache / "sglang" / "jit"), "twice": 42}
    assert any((cache / "tvm-ffi").iterdir()) and not list(home.rglob("*"))
