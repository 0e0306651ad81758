"""The one atomic file writer: a temporary file beside the target, its mode set before the first byte, fsync, one
rename. A reader (or a process killed at any point) sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import IO

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint


def write_atomic(path: Path, text: str, mode: int = 0o644, step: str | None = None) -> None:
    """Replace ``path`` with ``text`` (mode ``mode`` from the start); ``step`` names a fault checkpoint before the
    rename (the kill-at-every-step tests reach it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here, not at import: the CLI's --help path reads this module

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if step:
            checkpoint(step)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resolve_in(root: Path, path: str) -> str:
    """``path`` with its symlinks resolved as the system under ``root`` sees them (absolute links stay inside)."""
    parts, hops = [p for p in path.split("/") if p], 0
    done: list[str] = []
    while parts:
        part = parts.pop(0)
        if part in (".", ".."):
            done = done[:-1] if part == ".." else done
            continue
        here = root.joinpath(*done, part)
        if here.is_symlink() and hops < 40:
            hops += 1
            target = os.readlink(here)
            done = [] if target.startswith("/") else done
            parts = [p for p in target.split("/") if p] + parts
            continue
        done.append(part)
    return "/" + "/".join(done)


# ---------------------------------------------------------------------------------------------- links never followed
# kimi-serve runs as root where it changes the host; a symbolic link planted where it writes (by the owner of that
# folder: the service user in its working directory, node_exporter's textfile folder, a staging tree under --root)
# would turn its write, truncate or chown onto another file. Every such write refuses the link instead.


def link_refused(path: Path, what: str, fix: str) -> KimiServeError:
    """The one-line error (exit 5) for a link (or a file that is not a plain file of its own) where root writes."""
    return KimiServeError(
        f"{what}: kimi-serve does not follow links where it writes as root",
        where=str(path),
        hint=fix,
        exit_code=ExitCode.ENVIRONMENT,
    )


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def open_lock(path: Path) -> IO[str]:
    """Open (or create, 0644) the lock file ``path`` for reading and writing without following a link at its name: a
    planted link, or a hard link to another file, is refused (exit 5), never truncated. OSError for anything else."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_refused(
                path, f"the lock is a symbolic link (to {_link_target(path)})", f"remove it: rm {path}"
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        shape = "has other names (a hard link)" if stat.S_ISREG(st.st_mode) else "is not a plain file"
        raise link_refused(path, f"the lock {shape}", f"remove it: rm {path}")
    return os.fdopen(fd, "r+", encoding="utf-8")


def create_new(path: Path, mode: int = 0o600) -> int:
    """A fresh file at ``path`` for writing (whatever was at its name removed first, a link itself and not what it
    points to), created with ``O_EXCL``: a link planted again in between makes it fail, never followed."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def escape_problem(root: Path, path: Path) -> str | None:
    """Why writing at ``path`` (under ``root``) would follow a symbolic link out of ``root``: the path the kernel
    follows differs from the one the system under ``root`` sees (an absolute link in a scratch root, a relative one
    climbing out), or None. Under ``/`` nothing is outside."""
    real_root = os.path.realpath(root)
    inside = resolve_in(root, "/" + os.path.relpath(path, root))
    meant = os.path.normpath(os.path.join(real_root, inside.lstrip("/")))
    kernel = os.path.realpath(path)
    if kernel == meant:
        return None
    return f"a symbolic link on the way leads to {kernel}, outside {root} (the system under it means {inside})"


def refuse_escape(root: Path, path: Path, fix: str) -> None:
    """Exit 5 naming ``path`` when writing there follows a link out of ``root`` (:func:`escape_problem`)."""
    problem = escape_problem(root, path)
    if problem:
        raise link_refused(path, problem, fix)


def chown_nofollow(path: Path, uid: int, gid: int, fix: str) -> bool:
    """Make ``uid:gid`` the owner of the file or directory ``path`` itself (opened with ``O_NOFOLLOW``, changed
    through that descriptor, so a link swapped in is never followed); exit 5 when it is a link or not a plain file or
    directory. Whether the owner changed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_refused(path, f"it is a symbolic link (to {_link_target(path)})", fix) from None
        raise
    try:
        st = os.fstat(fd)
        if not (stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
            raise link_refused(path, "it is not a plain file of its own or a directory", fix)
        if (st.st_uid, st.st_gid) == (uid, gid):
            return False
        os.fchown(fd, uid, gid)
        return True
    finally:
        os.close(fd)
