"""scripts/gpu-smoke.sh (docs/testing.md "The GPU smoke script") where no GPU is: it parses, shellcheck finds nothing
(where shellcheck is installed), and on a machine without nvidia-smi it stops at once with one clear line, exit 5."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu-smoke.sh"


def test_it_parses_and_shellcheck_is_clean() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True).returncode == 0
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


def test_without_a_gpu_it_stops_with_one_line_and_exit_5(tmp_path: Path) -> None:
    tools = tmp_path / "bin"  # what the script needs before its GPU check; no nvidia-smi, whatever this host has
    tools.mkdir()
    for name in ("date", "dirname", "mktemp", "mkdir", "tee", "git"):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    out = tmp_path / "out"
    env = {"PATH": str(tools), "OUT": str(out), "GPU_SMOKE_WORK": str(tmp_path / "work"), "HOME": str(tmp_path)}
    done = subprocess.run([str(shutil.which("bash")), str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 5, done.stdout + done.stderr
    summary = (out / "summary.txt").read_text()
    assert "FAIL  no nvidia-smi: no NVIDIA GPU or driver here (this machine cannot run the smoke test)" in summary
    assert "exit 5" in summary.splitlines()[-1]
    assert not os.listdir(tmp_path / "work")  # nothing started, nothing written but the summary
