"""A real systemd for tests: tests/systemd/sandbox.sh boots one as PID 1 of a systemd-nspawn container (an overlay of
this machine's own /), and commands run in the sandbox's mount namespace, where plain systemctl/journalctl reach it.

Needs root and systemd-nspawn (apt-get install -y systemd systemd-container); skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

SANDBOX = Path(__file__).resolve().parent / "sandbox.sh"
REPO = Path(__file__).resolve().parent.parent.parent


@dataclass
class Sandbox:
    holder: int  # host pid of a process inside the sandbox's mount namespace
    leader: int  # host pid of the container's systemd
    bus: str

    def run(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the host side of the sandbox (systemctl there talks to the container's systemd)."""
        full_env = {**os.environ, **(env or {}), "SYSTEMCTL_FORCE_BUS": "1", "DBUS_SYSTEM_BUS_ADDRESS": self.bus}
        return subprocess.run(
            ["nsenter", "-t", str(self.holder), "-m", "--wdns=/", "--", *argv],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn)"
    for tool in ("systemd-nspawn", "nsenter", "unshare", "systemctl"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install -y systemd systemd-container)"
    return None


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("sandbox") / "sandbox.log"
    # nspawn gives the container its own /tmp: bind in what the unit executes (this checkout, its venv, the SGLang
    # venv), wherever CI cloned them.
    binds = {str(REPO), str(Path(sys.prefix).resolve())}
    if os.environ.get("KIMI_SERVE_SGLANG_PYTHON"):
        binds.add(str(Path(os.environ["KIMI_SERVE_SGLANG_PYTHON"]).resolve().parent.parent))
    env = {**os.environ, "SBX_BIND": " ".join(sorted(binds))}
    hold = 'echo "$$ $SBX_LEADER $DBUS_SYSTEM_BUS_ADDRESS"; exec cat >/dev/null'
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [str(SANDBOX), "sh", "-c", hold],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline().split()
    if len(line) != 3:
        proc.wait(timeout=60)
        pytest.fail(f"the systemd sandbox did not start: {log.read_text()}")
    try:
        yield Sandbox(holder=int(line[0]), leader=int(line[1]), bus=line[2])
    finally:
        proc.stdin.close()  # the holder exits; sandbox.sh powers the container off and unmounts everything
        proc.wait(timeout=120)
