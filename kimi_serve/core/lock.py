"""Locks per resource: one kimi-serve command at a time changes a thing, and only commands that share a thing wait.

- a target root's state (:func:`root_lock`): ``STATE_ROOT/host.lock`` for ``/`` (install-service, uninstall-service,
  restart), ``STATE_ROOT/locks/root-HASH.lock`` for a scratch ``--root``;
- an engine venv (:func:`directory_lock` on its site-packages: ``patches apply|revert`` and ``engine install``
  exclusive, ``up`` of an SGLang profile shared);
- a GPU and a port (:func:`resource_lock`, ``STATE_ROOT/locks/gpu-N.lock``, ``port-P.lock``: ``up``).

Each is an ``fcntl.flock`` taken *before* the command reads the state it will change, so two runs started together
cannot both pass their checks; the kernel drops it when its holder dies, so a crash never leaves it stale. The holder
writes ``{"command", "pid", "since"}`` into the file, which a second run names in its error (exit 75) unless it
waits. Re-entrant within one process (restart runs install's steps under the lock it holds).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from kimi_serve.core.errors import ExitCode, KimiServeError, LockHeld
from kimi_serve.core.files import open_lock
from kimi_serve.core.inputs import load_json, read_text
from kimi_serve.core.settings import STATE_DIR_ENV, state_root

LOCK_NAME = "host.lock"
_SOMEONE = "another kimi-serve command"
LOCKS_DIR = "locks"  # STATE_ROOT/locks/: the GPUs and ports `up` holds
_WRITABLE = f"set {STATE_DIR_ENV} to a writable directory"
_held: dict[Path, int] = {}  # lock path -> depth, for re-entry in this process
_fds: dict[Path, int] = {}  # lock path -> the fd its flock is held through, while held


def held_lock_fds() -> list[int]:
    """The fds of every flock this process holds. A child started with them (``pass_fds``) shares the hold: the
    kernel releases a lock only when its last holder exits, so `up`'s servers keep its locks past a killed `up`."""
    return sorted(_fds.values())


@contextlib.contextmanager
def _depth(path: Path) -> Iterator[None]:
    """Count one hold of ``path`` by this process (the first takes the flock; a nested one only counts)."""
    _held[path] = _held.get(path, 0) + 1
    try:
        yield
    finally:
        _held[path] -= 1
        if not _held[path]:
            del _held[path]


def _flock(fd: int, flags: int, wait: bool, deadline: float | None, refusal: Callable[[], LockHeld]) -> None:
    """Take the flock (``flags``) on ``fd``, retrying while ``wait`` until ``deadline``; else ``refusal()``'s error."""
    while True:
        try:
            fcntl.flock(fd, flags | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if not wait or (deadline is not None and time.monotonic() > deadline):
                raise refusal() from None
            time.sleep(0.2)


def lock_path(state_dir: Path | None = None) -> Path:
    return state_root(state_dir) / LOCK_NAME


def holder(path: Path) -> dict[str, Any] | None:
    """Who holds (or last held) the lock, as its holder wrote it; None when unknown."""
    try:
        data = load_json(read_text(path) or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def host_lock(
    command: str, *, state_dir: Path | None = None, wait: bool = False, wait_timeout: float | None = None
) -> contextlib.AbstractContextManager[Path]:
    """Hold the host lock for ``command`` (e.g. ``"patches apply"``). Raises exit 75 when it is held and ``wait`` is
    false (or ``wait_timeout`` passes), exit 5 when the state root cannot be written."""
    return file_lock(
        lock_path(state_dir), command, wait=wait, wait_timeout=wait_timeout, cannot=f"run as root, or {_WRITABLE}"
    )


def root_lock_path(root: Path) -> Path:
    """The lock of what a command changes under ``root``: the host lock for ``/``, else the scratch root's own
    ``STATE_ROOT/locks/root-HASH.lock`` (keyed by its real path; nothing is written into the root itself), so an
    offline install into a staging tree waits for nothing else on this host."""
    real = os.path.realpath(root)
    if Path(real) == Path("/"):
        return lock_path()
    return state_root() / LOCKS_DIR / f"root-{hashlib.sha256(real.encode()).hexdigest()[:16]}.lock"


def root_lock(command: str, root: Path, *, wait: bool = False) -> contextlib.AbstractContextManager[Path]:
    """Hold the lock of ``root``'s state for ``command`` (the host lock when ``root`` is ``/``); exit 75 when held."""
    path = root_lock_path(root)
    if path == lock_path():
        return host_lock(command, wait=wait)
    return file_lock(path, command, wait=wait, doing=f"is changing {root}", cannot=_WRITABLE)


def resource_lock_path(kind: str, name: str, state_dir: Path | None = None) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return state_root(state_dir) / LOCKS_DIR / f"{kind}-{safe}.lock"


def resource_lock(
    command: str, kind: str, name: str, *, state_dir: Path | None = None, wait: bool = False
) -> contextlib.AbstractContextManager[Path]:
    """Hold ``kind`` ``name`` (``gpu 3``, ``port 30000``) for ``command``: exit 75 naming the holder when another
    kimi-serve command has it (or wait, with ``wait``)."""
    path = resource_lock_path(kind, name, state_dir)
    return file_lock(path, command, wait=wait, doing=f"holds {kind} {name}", cannot=_WRITABLE)


@contextlib.contextmanager
def file_lock(
    path: Path,
    command: str,
    *,
    wait: bool = False,
    wait_timeout: float | None = None,
    doing: str = "is changing this host",
    cannot: str = "run as root",
) -> Iterator[Path]:
    """Hold the flock on ``path`` for ``command`` (the host lock, or a lock on what a command changes). ``doing``
    completes the exit-75 message after the holder's name; ``cannot`` is the fix when ``path`` cannot be written."""
    if path in _held:  # this process holds it already: no second flock
        with _depth(path):
            yield path
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f: IO[str] = open_lock(path)  # never through a link planted at its name
    except OSError as exc:
        raise KimiServeError(
            f"cannot write the lock {path}: {exc.strerror or exc}", hint=cannot, exit_code=ExitCode.ENVIRONMENT
        ) from None

    def refusal() -> LockHeld:
        for _ in range(21):  # the holder writes its name just after taking the lock
            if info := holder(path):
                break
            time.sleep(0.05)
        return LockHeld(f"{_describe(info)} {doing}", where=str(path))

    with f:
        _flock(
            f.fileno(), fcntl.LOCK_EX, wait, None if wait_timeout is None else time.monotonic() + wait_timeout, refusal
        )
        f.seek(0)
        f.truncate()
        since = datetime.now(UTC).isoformat(timespec="seconds")
        f.write(json.dumps({"command": command, "pid": os.getpid(), "since": since}))
        f.flush()
        _fds[path] = f.fileno()
        try:
            with _depth(path):
                yield path
        finally:
            del _fds[path]
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return _SOMEONE
    return f"`kimi-serve {info.get('command', '?')}` (pid {info.get('pid', '?')}, since {info.get('since', '?')})"


def _flock_holder(st: os.stat_result) -> tuple[str, bool] | None:
    """Who holds a flock on the file ``st`` describes, from /proc/locks (pid and command line), and whether that hold
    is shared (READ); None when /proc/locks names no holder."""
    try:
        lines = Path("/proc/locks").read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        lines = []
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        cols = line.split()
        if len(cols) >= 6 and cols[1] == "FLOCK" and cols[5] == wanted and not cols[0].endswith("->"):
            try:
                argv = Path(f"/proc/{cols[4]}/cmdline").read_bytes().split(b"\0")
                shown = " ".join(a.decode(errors="replace") for a in argv if a)[:120]
            except OSError:
                shown = "?"
            return f"pid {cols[4]} ({shown})", cols[3] == "READ"
    return None


def flock_holder(path: Path) -> str | None:
    """Who holds a flock on ``path`` now (``pid N (command line)``, from /proc/locks: nothing is taken, so a run
    starting meanwhile is not refused), or None: no one, or no such file."""
    try:
        found = _flock_holder(os.stat(path))
    except OSError:
        return None
    return found[0] if found else None


@contextlib.contextmanager
def directory_lock(
    path: Path,
    *,
    wait: bool = False,
    doing: str = "is changing it",
    shared: bool = False,
    doing_shared: str = "is using it",
) -> Iterator[Path]:
    """A flock on the directory ``path`` itself: nothing is written into it (a byte-identical tree stays so), and any
    run that changes it takes the same lock whatever its state root. ``shared``: a hold that only keeps it from
    changing (a server running from it; any number at once). Exit 75 naming the holder (from /proc/locks) and
    ``doing`` (``doing_shared`` for a shared holder) when held and not ``wait``."""
    if path in _held:  # this process holds it already: no second flock
        with _depth(path):
            yield path
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise KimiServeError(
            f"cannot open {path}: {exc.strerror or exc}", hint="check the path", exit_code=ExitCode.ENVIRONMENT
        ) from None

    def refusal() -> LockHeld:
        who, reading = _flock_holder(os.fstat(fd)) or (_SOMEONE, False)
        return LockHeld(f"{who} {doing_shared if reading else doing}", where=str(path))

    try:
        _flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, wait, None, refusal)
        _fds[path] = fd
        with _depth(path):
            yield path
    finally:
        _fds.pop(path, None)
        os.close(fd)
