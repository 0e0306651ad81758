"""No server outlives `up`, however `up` ends (docs/up.md, "However `up` ends"): real `kimi-serve up` of `sim` and
`sim-dp2` in a subprocess; its terminal closed (a real pty hangup: SIGHUP, writes failing with EIO) or plain SIGHUP
-> the same orderly stop as SIGTERM, exit 130, every server gone and its ports free; SIGKILLed -> every server gets
its parent-death signal and is gone within seconds, and `up`'s locks stay held (checked by taking them, as a second
`up` would) for as long as any of them runs; the same for SGLang's real launch_server on CPU, whose scheduler and
detokenizer processes go with it. Processes are read from /proc."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
from test_up_sim import sim_profile
from up_helpers import UpProcess, cpu_profile, dp2_profile, free_port, live_group, server_pid

from kimi_serve.core.lock import resource_lock_path

START_S = 300  # a loaded 2-core machine; the simulator starts in seconds when idle
GONE_S = 15  # generous: the simulator and the router stop on SIGTERM in about a second


class UpOnTerminal:
    """`kimi-serve up` as the session leader of a new pseudo-terminal (its controlling terminal, as in an SSH
    session); :meth:`hang_up` closes the terminal's master side: the kernel sends SIGHUP, writes fail with EIO."""

    def __init__(self, args: list[str], state: Path) -> None:
        self.master, slave = os.openpty()

        def session_on_terminal() -> None:  # setsid is done by start_new_session; then take the terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kimi_serve", "up", *args],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env={**os.environ, "KIMI_SERVE_STATE_DIR": str(state)},
                start_new_session=True,
                preexec_fn=session_on_terminal,
            )
        finally:
            os.close(slave)
        self.data = bytearray()
        self._closing = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while not self._closing.is_set():
                ready, _, _ = select.select([self.master], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(self.master, 65536)
                    except OSError as exc:  # EIO: every slave fd is closed
                        if exc.errno != errno.EIO:
                            raise
                        break
                    if not chunk:
                        break
                    self.data += chunk
        finally:
            os.close(self.master)

    @property
    def output(self) -> str:
        return self.data.decode(errors="replace").replace("\r\n", "\n")

    def wait_for(self, text: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            if text in self.output:
                return True
            time.sleep(0.2)
        return text in self.output

    def hang_up(self) -> None:
        self._closing.set()
        self._reader.join(5)


def _pids(output: str, *patterns: str) -> list[int]:
    found = []
    for pattern in patterns:
        m = re.search(pattern, output)
        assert m, f"{pattern!r} not in:\n{output[-3000:]}"
        found.append(int(m.group(1)))
    return found


def _alive(pid: int) -> bool:
    """Whether any thread of ``pid`` still runs: a process whose main thread is already a zombie ("Z" in its stat)
    may have other threads still tearing down, and its files (and flocks) go only with the last of them."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if text[text.rindex(")") + 2] not in "ZX":
            return True
    return False


def _running(pgid: int) -> list[int]:
    """The processes of group ``pgid`` with a thread still running (zombies whose threads all ended excluded)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[2]) == pgid and _alive(int(stat.parent.name)):
            found.append(int(stat.parent.name))
    return found


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT does not count
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock_held(path: Path) -> bool:
    """Whether another process holds the flock on ``path`` (taken and released at once, as a second `up` would)."""
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def _gone(pids: list[int], locks: list[Path], timeout: float) -> float:
    """Seconds until every server and its process group is gone; meanwhile, each lock is held while any server is
    alive (a lock is read before the servers are, so a server alive afterwards was alive when it was read)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        held = [_lock_held(p) for p in locks]
        alive = [p for p in pids if _alive(p) or _running(p)]
        if not alive:
            return time.monotonic() - start
        if not all(held):  # free while a server runs: unless it was in its last milliseconds (files already closed)
            time.sleep(0.3)
            alive = [p for p in pids if _alive(p) or _running(p)]
            assert not alive, f"servers {alive} run but `up`'s locks are free: {dict(zip(locks, held, strict=True))}"
        time.sleep(0.1)
    raise AssertionError(f"servers still running {timeout:g}s after `up` ended: {[p for p in pids if _alive(p)]}")


def _no_leftovers(pids: list[int]) -> None:
    """Whatever failed, no server of the test is left behind."""
    for pid in pids:
        if live_group(pid):
            os.killpg(pid, signal.SIGKILL)


def _servers_gone(pids: list[int], ports: list[int], locks: list[Path]) -> None:
    assert all(_running(p) == [] for p in pids), [(p, _running(p)) for p in pids]
    assert all(_port_free(p) for p in ports), ports
    assert not any(_lock_held(p) for p in locks), locks


def _sim(tmp_path: Path) -> tuple[list[str], list[int]]:
    port = free_port()
    return ["--profile", str(sim_profile(tmp_path, port)), "--log-file", str(tmp_path / "s.log"), "--no-verify"], [port]


def _dp2(tmp_path: Path) -> tuple[list[str], list[int]]:
    profile, base, router = dp2_profile(tmp_path, None)
    args = ["--profile", str(profile), "--log-file", str(tmp_path / "up.log"), "--no-verify", "-q"]
    return args, [base, base + 1, router]


SIM_PIDS = (r"server pid (\d+) \(own session",)
DP2_PIDS = (r"replica0: server pid (\d+)", r"replica1: server pid (\d+)", r"router: pid (\d+) \(own session")
READY = {"sim": "supervising pid", "dp2": "supervising 2 replicas"}


def test_closing_the_terminal_stops_the_server_as_sigterm_does(tmp_path: Path, sglang_python: str) -> None:
    args, ports = _sim(tmp_path)
    up = UpOnTerminal(args, tmp_path)
    pids: list[int] = []
    try:
        assert up.wait_for(READY["sim"], START_S), up.output[-4000:]
        pids = _pids(up.output, *SIM_PIDS)
        up.hang_up()  # the SSH session closes: SIGHUP from the kernel, and nothing can be written any more
        assert up.proc.wait(60) == 130
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
        up.hang_up()
        _no_leftovers(pids)
    log = (tmp_path / "s.log").read_text()
    assert "Shutting down" in log or "shutdown" in log.lower(), log[-2000:]  # the server's own orderly stop
    _servers_gone(pids, ports, [resource_lock_path("port", str(p), tmp_path) for p in ports])


@pytest.mark.parametrize("shape", ["sim", "dp2"])
def test_sighup_stops_every_server_in_order(tmp_path: Path, sglang_python: str, shape: str) -> None:
    args, ports = (_sim if shape == "sim" else _dp2)(tmp_path)
    up = UpProcess(args, tmp_path)
    pids: list[int] = []
    try:
        assert up.wait_for(READY[shape], START_S), up.output[-4000:]
        pids = _pids(up.output, *(SIM_PIDS if shape == "sim" else DP2_PIDS))
        up.proc.send_signal(signal.SIGHUP)
        assert up.finish(90) == 130, up.output[-3000:]
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
        _no_leftovers(pids)
    assert "SIGHUP received" in up.output, up.output[-3000:]
    if shape == "dp2":  # the same order as for SIGTERM: the router first, then the replicas
        assert "stopping the router first" in up.output, up.output[-3000:]
    _servers_gone(pids, ports, [resource_lock_path("port", str(p), tmp_path) for p in ports])


@pytest.mark.parametrize("shape", ["sim", "dp2"])
def test_a_sigkilled_up_leaves_no_server_and_holds_its_locks_until_they_are_gone(
    tmp_path: Path, sglang_python: str, shape: str
) -> None:
    args, ports = (_sim if shape == "sim" else _dp2)(tmp_path)
    up = UpProcess(args, tmp_path)
    pids: list[int] = []
    locks = [resource_lock_path("port", str(p), tmp_path) for p in ports]
    try:
        assert up.wait_for(READY[shape], START_S), up.output[-4000:]
        pids = _pids(up.output, *(SIM_PIDS if shape == "sim" else DP2_PIDS))
        assert all(_lock_held(p) for p in locks)
        up.proc.kill()
        assert up.finish(30) == -signal.SIGKILL
        took = _gone(pids, locks, GONE_S)
    finally:
        _no_leftovers(pids)
    print(f"{shape}: every server gone {took:.1f}s after `up` was SIGKILLed")
    _servers_gone(pids, ports, locks)


def test_a_sigkilled_up_takes_real_sglang_down_with_its_scheduler(tmp_path: Path, sglang_python: str) -> None:
    """SGLang's main process gets the death signal (SIGTERM: its own orderly stop); its scheduler and detokenizer
    (same process group) carry SGLang's own PDEATHSIG on it. Nothing of the group is left, the GPU and port locks
    are held until then."""
    port = free_port()
    profile = cpu_profile(tmp_path, port, sglang_python)
    up = UpProcess(["--profile", str(profile), "--no-verify", "--log-file", str(tmp_path / "server.log")], tmp_path)
    pids: list[int] = []
    locks = [resource_lock_path("port", str(port), tmp_path), resource_lock_path("gpu", "0", tmp_path)]
    try:
        assert up.wait_for("supervising pid", START_S), up.output[-4000:]
        pids = [server_pid(up.output)]
        assert len(live_group(pids[0])) >= 2, live_group(pids[0])  # the main process and its subprocesses
        assert all(_lock_held(p) for p in locks)
        up.proc.kill()
        assert up.finish(30) == -signal.SIGKILL
        took = _gone(pids, locks, 90)  # SGLang's drain on a loaded CPU
    finally:
        _no_leftovers(pids)
    print(f"sglang: every process of the server's group gone {took:.1f}s after `up` was SIGKILLed")
    _servers_gone(pids, [port], locks)


PARENT = """
import sys, time
from pathlib import Path
from kimi_serve.core.lock import held_lock_fds, resource_lock
from kimi_serve.process.child import Server
CHILD = '''
import signal, sys, time
def drain(*_):
    time.sleep(1.0)  # a server's orderly stop takes a while: the locks must stay held meanwhile
    open(sys.argv[1], "w").write("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
print("ready", flush=True)
time.sleep(120)
'''
with resource_lock("test", "port", "1", state_dir=Path(sys.argv[2])):
    server = Server.start([sys.executable, "-c", CHILD, sys.argv[1]], {}, Path(sys.argv[3]), keep_fds=held_lock_fds())
    print(server.pid, flush=True)
    time.sleep(120)
"""


def test_a_child_gets_sigterm_when_its_parent_is_sigkilled_and_shares_its_locks(tmp_path: Path) -> None:
    """process/child.py on its own (no SGLang): the parent-death signal and the inherited lock, without `up`."""
    mark, log = tmp_path / "mark", tmp_path / "child.log"
    lock = resource_lock_path("port", "1", tmp_path)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(mark), str(tmp_path), str(log)], stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _lock_held(lock)
        parent.kill()
        assert parent.wait(10) == -signal.SIGKILL
        took = _gone([child], [lock], GONE_S)
        assert mark.read_text() == "SIGTERM" and took >= 0.5  # it drained, holding the lock, then exited
        assert not _lock_held(lock)
    finally:
        if parent.poll() is None:
            parent.kill()
        _no_leftovers([child] if child else [])
