"""Run the server as a child in its own session, stream its output, and stop it the way SGLang expects.

- Its own session and group: SGLang's kill paths (``kill_process_tree``, ``SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION``)
  cannot reach the supervisor.
- It gets SIGTERM when its parent dies, however it dies (``prctl(PR_SET_PDEATHSIG)`` between fork and exec, armed
  from the main thread only: the signal follows the thread that forked). SIGTERM, not SIGKILL: SGLang stops as on a
  requested stop, and its schedulers carry their own death signal. A server that ignores SIGTERM is not covered.
- ``keep_fds`` (`up`'s flocks) are inherited, so a server draining past a killed parent still holds its GPUs and ports.
- stdout and stderr: one thread each, bytes written verbatim to the capped log (:mod:`kimi_serve.process.server_log`),
  then decoded, split on ``\\r`` and ``\\n`` (tqdm bars) and queued as lines.
- Stopping: SIGTERM to the main PID only (a signal to the whole group goes through SGLang's crash path), SIGKILL to
  the group after a deadline, then to anything left in the group.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kimi_serve.core.runs import stat_fields
from kimi_serve.process.server_log import LOG_MAX_BYTES, CappedLog, tail_bytes
from kimi_serve.process.startup_log import split_stream

_EOF = None
_REAP_GRACE_S = 5.0  # how long leftover group members get to die on their own (PDEATHSIG) before SIGKILL
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
DEATH_SIGNAL = signal.SIGTERM  # what a child gets when its parent dies


@dataclass(frozen=True)
class Line:
    stream: str  # "stdout" | "stderr"
    text: str


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        fields = stat_fields(entry.name) if entry.name.isdigit() else []
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def die_with_parent() -> Callable[[], None] | None:
    """The ``preexec_fn`` that sets the child's parent-death signal (:data:`DEATH_SIGNAL`); None off the main thread
    (the signal would come when that thread ends) or where libc has no ``prctl``. Everything it calls is looked up
    before the fork; when the parent died before it was armed, the child signals itself."""
    if threading.current_thread() is not threading.main_thread():
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent, sig = os.getpid(), int(DEATH_SIGNAL)
    getppid, kill, me = os.getppid, os.kill, os.getpid
    zero = ctypes.c_ulong(0)
    args = (ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(sig), zero, zero, zero)

    def arm() -> None:
        prctl(*args)  # prctl(int option, unsigned long arg2, ...)
        if getppid() != parent:  # the parent died between the fork and the prctl: no signal will come
            kill(me(), sig)

    return arm


def describe_status(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (status {returncode}, shell {128 - returncode})"
    return f"exit status {returncode}"


class Server:
    """A started server process; its lines arrive on :meth:`lines`."""

    def __init__(self, proc: subprocess.Popen[bytes], log: CappedLog, log_path: Path, keep_lines: bool = True) -> None:
        self.proc = proc
        self.log_path = log_path
        self.keep_lines = keep_lines  # False: the output goes to the log file only (a long run queues nothing)
        self.pgid = proc.pid  # a new session leader's group id is its pid
        self._log = log
        self._log_lock = threading.Lock()
        self._queue: queue.Queue[Line | None] = queue.Queue()
        self._open_streams = 2
        self.term_sent_at: float | None = None
        self.killed = False
        for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            assert stream is not None
            threading.Thread(target=self._read, args=(name, stream), name=f"server-{name}", daemon=True).start()

    @classmethod
    def start(
        cls,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        keep_lines: bool = True,
        keep_fds: Sequence[int] = (),
        log_max_bytes: int = LOG_MAX_BYTES,
    ) -> Server:
        """Start ``argv`` in its own session, dying with this process (:func:`die_with_parent`), inheriting
        ``keep_fds``; its output appended to ``log_path`` (rotated to ``FILE.1`` past ``log_max_bytes``) and, with
        ``keep_lines``, queued for :meth:`lines`."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = CappedLog(log_path, log_max_bytes)
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=tuple(keep_fds),
                preexec_fn=die_with_parent(),  # armed on the main thread only (die_with_parent)
            )
        except OSError:
            log.close()
            raise
        return cls(proc, log, log_path, keep_lines)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, name: str, stream: BinaryIO) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        tail = ""
        while True:
            chunk = os.read(stream.fileno(), 65536)
            with self._log_lock:
                if not self._log.closed and chunk:
                    self._log.write(chunk)
            if not chunk:
                break
            if not self.keep_lines:
                continue
            pieces, tail = split_stream(tail + decoder.decode(chunk))
            for piece in pieces:
                self._queue.put(Line(name, piece))
        if tail.strip() and self.keep_lines:
            self._queue.put(Line(name, tail))
        self._queue.put(_EOF)

    def lines(self, timeout: float) -> list[Line]:
        """Lines that arrived, waiting up to ``timeout`` for the first."""
        out: list[Line] = []
        wait = True
        with contextlib.suppress(queue.Empty):
            while self._open_streams:  # both streams ended: nothing more will come (and no EOF is left to count)
                item = self._queue.get(timeout=timeout) if wait else self._queue.get_nowait()
                wait = False
                if item is None:  # _EOF
                    self._open_streams -= 1
                else:
                    out.append(item)
        return out

    @property
    def output_closed(self) -> bool:
        return self._open_streams == 0

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self) -> None:
        """SIGTERM to the main PID only."""
        if self.proc.poll() is None and self.term_sent_at is None:
            self.proc.send_signal(signal.SIGTERM)
            self.term_sent_at = time.monotonic()

    def kill_group(self) -> None:
        """SIGKILL to every process in the server's group (the escalation)."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
            self.killed = True
        except ProcessLookupError:
            pass

    def reap(self, timeout: float) -> int:
        """Wait for the main process; then make sure no member of its group survives. Returns its status."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            code = self.proc.wait()
        end = time.monotonic() + _REAP_GRACE_S
        while group_members(self.pgid) and time.monotonic() < end:
            time.sleep(0.1)
        if group_members(self.pgid):
            self.kill_group()
            end = time.monotonic() + _REAP_GRACE_S
            while group_members(self.pgid) and time.monotonic() < end:
                time.sleep(0.05)
        return code

    def stop(self, grace_s: float) -> int:
        """SIGTERM to the main PID, SIGKILL to the group after ``grace_s``; returns the main process's status."""
        self.terminate()
        return self.reap(grace_s)

    def log_tail(self, lines: int = 20) -> list[str]:
        """The last ``lines`` non-empty lines of the log file (tqdm's ``\\r`` pieces split as lines)."""
        data = tail_bytes(self.log_path)  # read from the end, whatever the log's size
        pieces, tail = split_stream(data.decode("utf-8", errors="replace"))
        return [*pieces, *([tail] if tail.strip() else [])][-lines:]

    def close(self) -> None:
        with self._log_lock:
            self._log.close()
