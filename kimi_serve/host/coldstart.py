"""What a cold start's weight phase is made of, measured on this host: the checkpoint's bytes, the sequential read
bandwidth of the filesystem holding it, how much of it is already in the page cache, and free RAM (docs/coldstart.md).

- The bandwidth probe reads at most ``bound`` bytes (default 2 GiB, never more than the checkpoint) and stops after
  ``time_limit`` seconds, with O_DIRECT, so it neither uses nor disturbs the page cache. Where O_DIRECT is refused
  (tmpfs, some network filesystems) it reads only pages that are *not* cached and drops exactly those pages again
  afterwards (``posix_fadvise(DONTNEED)`` on the ranges it brought in): it never evicts what was cached before.
- Residency is ``mincore(2)`` on a read-only mapping of each shard (windows of 1 GiB), through ctypes.
- The floor is bytes / bandwidth: the fastest the weights can come off this disk.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kimi_serve.core.inputs import load_json
from kimi_serve.core.report import json_meta, rounded

GIB = 1024**3
MIB = 1024**2
PROBE_BOUND = 2 * GIB
PROBE_TIME_S = 10.0
PROBE_THREADS = 4
BLOCK = 8 * MIB
ALIGN = 4096
WINDOW = GIB  # mincore window: a 256 KiB vector per GiB
PAGE = os.sysconf("SC_PAGE_SIZE")
INDEX = "model.safetensors.index.json"


class ProbeError(Exception):
    """The probe could not time a read (say why)."""


@dataclass(frozen=True)
class Checkpoint:
    files: tuple[Path, ...]  # the shards SGLang reads, in load order, existing regular files only
    sizes: tuple[int, ...]
    problems: tuple[tuple[Path, str], ...] = ()  # shards that are missing, dangling links or not regular files: why

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def shards(self) -> int:
        return len(self.files)

    @property
    def missing(self) -> int:
        return len(self.problems)


def shard_files(model_dir: Path) -> list[Path]:
    """The shards the index names (sorted, as SGLang lists them), or every ``*.safetensors``."""
    try:
        names = sorted(set(load_json((model_dir / INDEX).read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        names = []
    return [model_dir / n for n in names] if names else sorted(model_dir.glob("*.safetensors"))


def shard_problem(path: Path) -> tuple[int, str | None]:
    """(size, None) for a regular file, else (0, why it is no shard): checked with stat alone, never opened (a FIFO
    would block the reader forever)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            return 0, f"a dangling symlink (to {os.readlink(path)})"
        return 0, "missing"
    except OSError as exc:
        return 0, f"unreadable ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory", stat.S_IFSOCK: "a socket"}
        return 0, f"{kinds.get(stat.S_IFMT(st.st_mode), 'a device file')}, not a regular file"
    return st.st_size, None


def checkpoint_of(dirs: list[Path]) -> Checkpoint:
    checked = [(f, *shard_problem(f)) for d in dirs for f in shard_files(d)]
    kept = [(f, size) for f, size, why in checked if why is None]
    problems = tuple((f, why) for f, _, why in checked if why is not None)
    return Checkpoint(tuple(f for f, _ in kept), tuple(size for _, size in kept), problems)


def _libc() -> Any:
    lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return lib


_LIBC: Any = None
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: Path) -> bytearray:
    """One byte per page of ``path``: bit 0 set when the page is in the page cache (``mincore``)."""
    global _LIBC
    _LIBC = _LIBC or _libc()
    size = path.stat().st_size
    out = bytearray()
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, size, WINDOW):
            length = min(WINDOW, size - off)
            addr = _LIBC.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, off)
            if addr in (None, _MAP_FAILED):
                raise OSError(ctypes.get_errno(), f"mmap {path}")
            try:
                vec = ctypes.create_string_buffer((length + PAGE - 1) // PAGE)
                if _LIBC.mincore(addr, length, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore {path}")
                out += vec.raw
            finally:
                _LIBC.munmap(addr, length)
    finally:
        os.close(fd)
    return out


_BIT0 = bytes(b & 1 for b in range(256))


def _cached_pages(path: Path) -> tuple[bytearray, int]:
    """One byte per page, 1 when cached; and the file's size."""
    return resident_pages(path).translate(_BIT0), path.stat().st_size


def cached_bytes(path: Path) -> int:
    pages, size = _cached_pages(path)
    n = pages.count(1)
    if pages and pages[-1]:  # the last page is partial
        return (n - 1) * PAGE + (size - (len(pages) - 1) * PAGE)
    return n * PAGE


def residency(ckpt: Checkpoint) -> int:
    """Bytes of the checkpoint in the page cache now."""
    return sum(cached_bytes(f) for f in ckpt.files)


def drop_cache(path: Path, offset: int = 0, length: int = 0) -> None:
    """``posix_fadvise(DONTNEED)``: the kernel drops clean cached pages of that range (tests; the probe's own pages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # dirty pages are not dropped: write them back first
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    """``/proc/meminfo`` in bytes (MemTotal, MemAvailable, Cached, ...)."""
    out = {}
    for line in path.read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


@dataclass(frozen=True)
class Bandwidth:
    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (("bytes_per_s", lambda b: round(b.bytes_per_s)),)

    bytes_read: int
    seconds: float = field(metadata=json_meta(encode=rounded(4)))
    method: str  # "O_DIRECT" | "uncached pages (dropped again)"
    bound: int
    device: int  # st_dev of the filesystem measured

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0


Chunk = tuple[Path, int, int]


def _plan(ckpt: Checkpoint, bound: int, ranges: dict[Path, list[tuple[int, int]]] | None) -> list[Chunk]:
    """Chunks (file, offset, length) to read, largest shards first, whose lengths sum to at most ``bound``."""
    chunks: list[Chunk] = []
    left = bound
    for f, size in sorted(zip(ckpt.files, ckpt.sizes, strict=True), key=lambda fs: -fs[1]):
        spans = ranges.get(f, []) if ranges is not None else [(0, size)]
        for start, end in spans:
            off = start
            while off < end and left >= ALIGN:
                length = min(BLOCK, end - off, left)
                length = (length + ALIGN - 1) // ALIGN * ALIGN if ranges is None else length
                if length > left:
                    length = left // ALIGN * ALIGN
                chunks.append((f, off, length))
                left -= length
                off += length
        if left < ALIGN:
            break
    return chunks


def _uncached_spans(f: Path) -> list[tuple[int, int]]:
    """Byte ranges of ``f`` not in the page cache, merged (runs found with bytes.find: C speed per run)."""
    pages, size = _cached_pages(f)
    spans: list[tuple[int, int]] = []
    i = pages.find(0)
    while i != -1:
        j = pages.find(1, i)
        j = len(pages) if j == -1 else j
        spans.append((i * PAGE, min(j * PAGE, size)))
        i = pages.find(0, j)
    return spans


def _read_chunks(chunks: list[Chunk], flags: int, time_limit: float, threads: int) -> tuple[int, float]:
    deadline = time.monotonic() + time_limit
    todo, lock, total, errors = iter(chunks), threading.Lock(), [0], list[OSError]()
    with contextlib.ExitStack() as opened:
        fds: dict[Path, int] = {}
        for f in dict.fromkeys(c[0] for c in chunks):
            fds[f] = os.open(f, os.O_RDONLY | flags)
            opened.callback(os.close, fds[f])

        def work() -> None:
            with mmap.mmap(-1, BLOCK) as buf:  # page-aligned, as O_DIRECT wants
                while time.monotonic() < deadline and not errors:
                    with lock:
                        chunk = next(todo, None)
                    if chunk is None:
                        return
                    try:
                        n = os.preadv(fds[chunk[0]], [memoryview(buf)[: chunk[2]]], chunk[1])
                    except OSError as exc:
                        errors.append(exc)
                        return
                    with lock:
                        total[0] += n

        start = time.monotonic()
        pool = [threading.Thread(target=work, daemon=True) for _ in range(max(1, threads))]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.monotonic() - start
    if errors and total[0] == 0:
        raise errors[0]
    return total[0], elapsed


def probe_bandwidth(
    ckpt: Checkpoint, *, bound: int = PROBE_BOUND, time_limit: float = PROBE_TIME_S, threads: int = PROBE_THREADS
) -> Bandwidth:
    """Time sequential reads of the checkpoint's own shards: at most ``min(bound, checkpoint bytes)`` bytes."""
    if not ckpt.files:
        raise ProbeError("no shards to read")
    bound = max(ALIGN, min(bound, ckpt.total))
    device = ckpt.files[0].stat().st_dev
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        chunks = _plan(ckpt, bound, None)
        try:
            n, secs = _read_chunks(chunks, direct, time_limit, threads)
            return Bandwidth(n, secs, "O_DIRECT", bound, device)
        except OSError:
            pass  # the filesystem refuses O_DIRECT: fall back to uncached pages
    spans = {f: _uncached_spans(f) for f in ckpt.files}
    chunks = _plan(ckpt, bound, spans)
    if not chunks:
        raise ProbeError(
            "every page of the checkpoint is in the page cache and O_DIRECT is refused: nothing uncached to time"
        )
    try:
        n, secs = _read_chunks(chunks, 0, time_limit, threads)
    finally:  # pages that were not cached before the probe (read, or read ahead by the kernel), nothing else
        for f in {c[0] for c in chunks}:
            for start, end in spans[f]:
                drop_cache(f, start, end - start)
    return Bandwidth(n, secs, "uncached pages (dropped again)", bound, device)


@dataclass(frozen=True)
class Figures:
    JSON_PROPERTIES: ClassVar[tuple[Any, ...]] = (
        ("checkpoint_bytes", lambda f: f.checkpoint.total),
        ("shards", lambda f: f.checkpoint.shards),
        ("missing_shards", lambda f: f.checkpoint.missing),
        ("floor_s", lambda f: rounded(2)(f.floor_s)),
        ("uncached_floor_s", lambda f: rounded(2)(f.predicted_disk_s)),
    )

    checkpoint: Checkpoint = field(metadata=json_meta(omit=True))
    cached: int = field(metadata=json_meta(key="cached_bytes"))
    mem_available: int
    mem_total: int
    # bytes/s; None when not measured
    bandwidth: float | None = field(
        metadata=json_meta(key="bandwidth_bytes_per_s", encode=lambda b: round(b) if b else None)
    )
    bandwidth_source: str = ""  # "measured now" | "measured <time>" | why it is unknown

    @property
    def floor_s(self) -> float | None:
        """Every byte from disk at the measured sequential bandwidth."""
        return self.checkpoint.total / self.bandwidth if self.bandwidth else None

    @property
    def predicted_disk_s(self) -> float | None:
        """The floor for what is not cached (the cached part loads at memory speed, counted as free)."""
        return max(self.checkpoint.total - self.cached, 0) / self.bandwidth if self.bandwidth else None


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def seconds(s: float) -> str:
    return f"{s:.0f}s" if s >= 100 else f"{s:.1f}s"
