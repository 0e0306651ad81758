"""A real systemd for tests: tests/systemd/sandbox.sh boots one as PID 1 of a systemd-nspawn container (an overlay of
this machine's own /), and commands run in the sandbox's mount namespace, where plain systemctl/journalctl reach it.

Needs root and systemd-nspawn (apt-get install -y systemd systemd-container); skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from sim_pool import SGLangSession, wait_probe_server

from kimi_serve.core.resources import package_root
from kimi_serve.core.settings import PROBE_SOCKET_ENV, with_pythonpath

SANDBOX = Path(__file__).resolve().parent / "sandbox.sh"
REPO = Path(__file__).resolve().parent.parent.parent
# Where the tier's `engine install` puts an engine (tests/systemd/test_engine_systemd.py): outside /root, /home and
# /tmp, which the unit's sandbox hides, and on the root filesystem, so uv hardlinks from its cache (seconds, no
# copy). One folder per run (two runs on one host never share it), made empty before the container starts (a bind
# needs its directory) and removed with the container; a killed run's folder is removed by the next run.
ENGINE_PARENT = Path("/var/cache/kimi-serve-tests")
ENGINE_ROOT = ENGINE_PARENT / f"engine-{os.getpid()}"


def _clear_dead_engines() -> None:
    for old in ENGINE_PARENT.glob("engine-*") if ENGINE_PARENT.is_dir() else []:
        pid = old.name.removeprefix("engine-")
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)


@dataclass
class Sandbox:
    holder: int  # host pid of a process inside the sandbox's mount namespace
    leader: int  # host pid of the container's systemd
    bus: str
    probe_socket: str | None = None  # a probe server in the sandbox's mount namespace (the run's own is not)

    def run(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the host side of the sandbox (systemctl there talks to the container's systemd)."""
        full_env = {**os.environ, **(env or {}), "SYSTEMCTL_FORCE_BUS": "1", "DBUS_SYSTEM_BUS_ADDRESS": self.bus}
        full_env.pop(PROBE_SOCKET_ENV, None)  # the run's probe server sees the host's files: it would not answer
        if self.probe_socket:
            full_env[PROBE_SOCKET_ENV] = self.probe_socket
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


@pytest.fixture(scope="session")
def _container(sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """One container for the whole systemd tier (its tests share one xdist worker: tests/conftest.py)."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("sandbox") / "sandbox.log"
    # nspawn gives the container its own /tmp: bind in what the unit executes (this checkout, its venv, the SGLang
    # venv), wherever CI cloned them.
    binds = {str(REPO), str(Path(sys.prefix).resolve())}
    binds.add(str(Path(sglang_session.python).resolve().parent.parent))
    _clear_dead_engines()
    shutil.rmtree(ENGINE_ROOT, ignore_errors=True)
    ENGINE_ROOT.mkdir(parents=True)
    binds.add(str(ENGINE_ROOT))
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
    sandbox = Sandbox(holder=int(line[0]), leader=int(line[1]), bus=line[2])
    probe = _start_probe_server(sandbox, sglang_session.python, log.parent)
    try:
        yield sandbox
    finally:
        if probe.stdin:
            probe.stdin.close()  # it ends when its stdin closes
        probe.wait(timeout=30)
        proc.stdin.close()  # the holder exits; sandbox.sh powers the container off and unmounts everything
        proc.wait(timeout=120)
        shutil.rmtree(ENGINE_ROOT, ignore_errors=True)
        with contextlib.suppress(OSError):
            ENGINE_PARENT.rmdir()  # when no other run has one there


def _start_probe_server(sandbox: Sandbox, python: str, directory: Path) -> subprocess.Popen[bytes]:
    """`check`'s SGLang tier, run by the CLI inside the sandbox's mount namespace, is answered by a probe server
    there (the run's own answers only its own namespace): one SGLang import for the tier instead of one per check."""
    sock = directory / "probe.sock"
    with open(directory / "probe.log", "wb") as log:
        probe = subprocess.Popen(
            [
                "nsenter",
                "-t",
                str(sandbox.holder),
                "-m",
                "--wdns=/",
                "--",
                python,
                "-P",
                "-m",
                "kimi_serve.sglang.probe",
            ]
            + ["--serve", str(sock)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=with_pythonpath(os.environ, package_root()),
        )
    if wait_probe_server(str(sock)):
        sandbox.probe_socket = str(sock)
    return probe


# what a test may leave in the container: its units (kimi-*), kimi-serve's records and key files
RESET = (
    "systemctl stop 'kimi-*' >/dev/null 2>&1; "
    "rm -f /etc/systemd/system/kimi-* /etc/systemd/system/*.wants/kimi-*; rm -rf /etc/systemd/system/kimi-*.d; "
    "rm -rf /var/lib/kimi-serve/* /etc/kimi-serve/*; "
    "systemctl daemon-reload; systemctl reset-failed"
)


@pytest.fixture
def sandbox(_container: Sandbox) -> Iterator[Sandbox]:
    """The session's container, reset after each test (units stopped and removed, records wiped), so a failed test
    leaves nothing for the next."""
    try:
        yield _container
    finally:
        _container.run(["sh", "-c", RESET], timeout=120)
