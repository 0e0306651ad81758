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


def write_atomic(path: Path, text: str, mode: int = 0o644, step: str | None = None, root: Path | None = None) -> None:
    """Replace ``path`` with ``text`` (mode ``mode`` from the start); ``step`` names a fault checkpoint before the
    rename (the kill-at-every-step tests reach it). With ``root`` (root writing into an install root), the folder is
    reached without following a link out of ``root`` at any component (:func:`write_under`; default root: the
    file's own folder)."""
    write_under(path.parent if root is None else root, path, text, mode, step)


def write_temp(path: Path, data: bytes, mode: int, *, suffix: str = ".tmp", mtime_ns: int | None = None) -> Path:
    """A new temporary file ``.NAME.*SUFFIX`` beside ``path`` holding ``data``, for the caller to rename over it: its
    mode set before the first byte, fsync'd, its modification time ``mtime_ns`` when given; removed again when any of
    that fails."""
    import tempfile  # here, not at import: the CLI's --help path reads this module

    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mtime_ns is not None:
            os.utime(name, ns=(mtime_ns, mtime_ns))
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def fsync_dir(path: Path) -> None:
    """fsync the folder ``path``: a rename or an unlink in it survives a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def _is_link(name: str, dir_fd: int | None = None) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def open_lock(path: Path) -> IO[str]:
    """Open (or create, 0644) the lock file ``path`` for reading and writing without following a link at its name: a
    planted link, or a hard link to another file, is refused (exit 5), never truncated. OSError for anything else."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_refused(
                path, f"the lock is a symbolic link (to {_is_link(str(path)) or '?'})", f"remove it: rm {path}"
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
    path.unlink(missing_ok=True)
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


# ---------------------------------------------------------------------------------------------- confined to a root
# A check of the path once, before the writes, is not enough: the owner of a folder on the way can swap it for a link
# between the check and the write. So every write, mkdir and chown as root walks from the root one component at a
# time, each opened relative to the one before with O_NOFOLLOW (openat). A link found on the way is resolved as the
# system under the root sees it and refused (exit 5) when that leaves the root: :func:`escape_problem`'s rule, held
# at each write. Under / nothing is outside.

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FIX = "remove the link, or pass a --root whose links stay inside it"


def open_dir_under(root: Path, path: Path, *, create: bool = False, mode: int = 0o755, fix: str = _ROOT_FIX) -> int:
    """A descriptor of the folder ``path`` (inside ``root``), reached component by component from ``root`` without the
    kernel following any link (see above); with ``create``, missing folders are made (``mkdir`` relative to the folder
    before, mode ``mode``). Exit 5 naming ``path`` for a link out of ``root``, or a component that is not a folder;
    FileNotFoundError for a missing one without ``create``. The caller closes the descriptor."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if rel == ".." or rel.startswith("../"):
        raise link_refused(path, f"it is outside {root}", fix)
    top = os.path.realpath(root) == "/"
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if create:
        os.makedirs(root, exist_ok=True)  # the root itself is the operator's (--root): made as before, links and all
    stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    hops = 0
    try:
        while parts:
            part = parts.pop(0)
            if part == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                elif not top:
                    raise link_refused(path, f"a symbolic link on the way climbs out of {root}", fix)
                continue
            target = _is_link(part, stack[-1])
            if target is not None:
                hops += 1
                if hops > 40 or (target.startswith("/") and not top):
                    why = "loops" if hops > 40 else f"leads to {target}, outside {root}"
                    raise link_refused(path, f"a symbolic link on the way ({part} -> {target}) {why}", fix)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            try:
                fd = os.open(part, _DIR, dir_fd=stack[-1])
            except FileNotFoundError:
                if not create:
                    raise
                hops += 1
                if hops > 40:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=stack[-1])
                parts.insert(0, part)  # opened (or found to be a link planted meanwhile) on the next turn
                continue
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise link_refused(path, f"{part} on the way is not a folder", fix) from None
                raise
            stack.append(fd)
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


def _same_folder(root: Path, path: Path, fd: int) -> None:
    """Exit 5 when ``path`` no longer reaches the folder ``fd`` is (it was swapped while root wrote in it)."""
    try:
        again = open_dir_under(root, path)
    except FileNotFoundError:
        again = -1
    try:
        st = os.fstat(fd)
        now = os.fstat(again) if again >= 0 else None
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise link_refused(path, "the folder was moved or replaced while kimi-serve wrote in it", _ROOT_FIX)
    finally:
        if again >= 0:
            os.close(again)


def mkdir_under(root: Path, path: Path, mode: int = 0o755) -> None:
    """Make the folder ``path`` and its parents inside ``root`` (:func:`open_dir_under`)."""
    os.close(open_dir_under(root, path, create=True, mode=mode))


def write_under(
    root: Path, path: Path, text: str, mode: int = 0o644, step: str | None = None, tmp: str | None = None
) -> None:
    """:func:`write_atomic` inside ``root``: the temporary file (``tmp``, default a random ``.NAME.*.tmp``; whatever is
    at that name removed first, a link itself) created ``O_EXCL | O_NOFOLLOW`` and renamed in the folder reached by
    :func:`open_dir_under`, the folder fsynced, then checked again (exit 5 if it was swapped meanwhile)."""
    fd = open_dir_under(root, path.parent, create=True)
    try:
        if tmp is None:
            tmp = f".{path.name}.{os.urandom(4).hex()}.tmp"
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        try:
            os.fchmod(out, mode)
            with os.fdopen(out, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            if step:
                checkpoint(step)
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
        os.fsync(fd)
        _same_folder(root, path.parent, fd)
    finally:
        os.close(fd)


def chown_under(root: Path, path: Path, uid: int, gid: int, fix: str) -> bool | None:
    """Make ``uid:gid`` the owner of ``path`` itself (inside ``root``), through a descriptor opened ``O_NOFOLLOW`` in
    its folder (:func:`open_dir_under`); exit 5 for a link, or anything but a directory or a plain file of its own.
    Whether the owner changed; None when nothing is there."""
    try:
        fd = open_dir_under(root, path.parent, fix=fix)
    except FileNotFoundError:
        return None
    try:
        try:
            one = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                target = _is_link(path.name, fd) or "?"
                raise link_refused(path, f"it is a symbolic link (to {target})", fix) from None
            raise
        try:
            st = os.fstat(one)
            if not (stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
                raise link_refused(path, "it is not a plain file of its own or a directory", fix)
            if (st.st_uid, st.st_gid) == (uid, gid):
                return False
            os.fchown(one, uid, gid)
            return True
        finally:
            os.close(one)
    finally:
        os.close(fd)


def remove_under(root: Path, path: Path, *, tree: bool = False) -> None:
    """Remove the file ``path`` inside ``root`` (``tree``: the folder and everything in it, ``shutil.rmtree`` relative
    to its parent's descriptor, which never follows a link), its folder reached by :func:`open_dir_under`; a link at
    ``path`` itself is removed (``tree``: left), never followed. Nothing there: nothing to do."""
    try:
        fd = open_dir_under(root, path.parent)
    except FileNotFoundError:
        return
    try:
        if tree:
            import shutil

            shutil.rmtree(path.name, dir_fd=fd, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.name, dir_fd=fd)
    finally:
        os.close(fd)
