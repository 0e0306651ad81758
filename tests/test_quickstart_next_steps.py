"""The quickstart's last words: scripts/next-steps.sh prints the next steps (kimi-serve on PATH, the engine exported,
`up --profile sim`, `verify --host`, `status --profile sim`), and every printed line runs as printed (exit 0), in a
fresh shell whose environment has neither kimi-serve on PATH nor the engine set: the exports are what make `up` and
`verify` work, and `status` tells the truth beside that foreground `up`. The printed port is the sim profile's own, so
the commands run in a private network namespace (``unshare``), where that port is free whatever else this machine
runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from kimi_serve.core.settings import SGLANG_PYTHON_ENV

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / ".venv" / "bin"


def _next_steps(python: str) -> list[str]:
    out = subprocess.run(
        [str(REPO / "scripts" / "next-steps.sh"), python], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    return [line for line in out.splitlines() if line.strip() and not line.startswith("#")]


def _isolated_shell() -> list[str]:
    """A shell in its own network namespace (loopback up), or a skip where this host allows none."""
    unshare = shutil.which("unshare")
    probe = ["-rn", "sh", "-c", "ip link set lo up"]
    if unshare is None or subprocess.run([unshare, *probe], capture_output=True, check=False).returncode != 0:
        pytest.skip("no private network namespace here (unshare -rn)")
    return [unshare, "-rn", "bash", "-c", 'ip link set lo up && exec bash "$0"']


def test_quickstart_ends_with_the_next_steps_when_the_check_passes() -> None:
    text = (REPO / "scripts" / "quickstart.sh").read_text()
    assert 'scripts/next-steps.sh "$KIMI_SERVE_SGLANG_PYTHON"' in text and "exec " not in text


def test_every_printed_next_step_runs_as_printed(sglang_python: str, tmp_path: Path) -> None:
    if not (BIN / "kimi-serve").exists():
        pytest.skip("no .venv (scripts/dev-venv.sh)")
    steps = _next_steps(sglang_python)
    exports = [s for s in steps if s.startswith("export ")]
    up = [s for s in steps if s.startswith("kimi-serve up ")]
    rest = [s for s in steps if s not in exports and s not in up]
    assert len(exports) == 2 and len(up) == 1 and any(s.startswith("kimi-serve verify --host ") for s in rest), steps
    assert up[0].startswith("kimi-serve up --profile sim ")
    assert any(s.startswith("kimi-serve status --profile sim ") for s in rest), steps
    # up as printed, in the background (a terminal of its own), then each other step as printed once it serves
    script = tmp_path / "steps.sh"
    script.write_text(
        "\n".join(
            [
                "set -m",  # job control: a background job keeps SIGINT, as up in a terminal of its own does
                *exports,
                f"{{\n{up[0]}\n}} > {tmp_path}/up.out 2>&1 &",  # the printed line whole, its comment included
                "UP=$!",
                f"echo $UP > {tmp_path}/up.pid",
                f"for _ in $(seq 300); do grep -q 'supervising pid' {tmp_path}/up.out && break; "
                "kill -0 $UP || break; sleep 1; done",
                *(f'{step}\necho "rc=$? <- {i}"' for i, step in enumerate(rest)),
                'kill -INT -- -"$UP"; wait "$UP"; echo "up rc=$?"',  # the job's group, as Ctrl-C reaches up
            ]
        )
        + "\n"
    )
    env = {k: v for k, v in os.environ.items() if k != SGLANG_PYTHON_ENV}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != BIN)
    proc = subprocess.Popen(
        [*_isolated_shell(), str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    out = ""
    try:
        out, _ = proc.communicate(timeout=540)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        pid_file = tmp_path / "up.pid"
        if (
            pid_file.exists() and "up rc=" not in out
        ):  # up in its own process group (set -m): never left running by a failed test
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    up_log = (tmp_path / "up.out").read_text(errors="replace") if (tmp_path / "up.out").exists() else ""
    assert "supervising pid" in up_log, (out[-3000:], up_log[-3000:])
    for i, step in enumerate(rest):
        assert f"rc=0 <- {i}" in out, (step, out[-4000:])
    assert "up rc=130" in out, (out[-2000:], up_log[-2000:])
