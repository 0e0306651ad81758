"""The run-time library search path (``DT_RPATH`` / ``DT_RUNPATH``) of an ELF executable, read and rewritten in place.

A shared CPython build finds ``libpythonX.Y.so`` through a search path baked into its executable (usually the
absolute ``PREFIX/lib`` it was built for); :func:`set_search_path` overwrites that string with a shorter one
(``$ORIGIN/../lib``) padded with NULs, as ``chrpath`` does: nothing moves. 64-bit little-endian ELF only (x86_64,
aarch64); anything else is reported as unreadable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29
_TAGS = {DT_RPATH: "RPATH", DT_RUNPATH: "RUNPATH", DT_NEEDED: "NEEDED"}


class ElfError(ValueError):
    """Not an ELF file this module reads (not ELF, not 64-bit little-endian, a malformed dynamic section)."""


@dataclass(frozen=True)
class SearchPath:
    tag: str  # "RPATH" or "RUNPATH" ("NEEDED" in :func:`_strings`: a library the executable links)
    value: str
    offset: int  # of the string in the file
    size: int  # its bytes, without the terminating NUL


def _vaddr_to_offset(loads: list[tuple[int, int, int]], vaddr: int) -> int:
    for offset, start, size in loads:
        if start <= vaddr < start + size:
            return vaddr - start + offset
    raise ElfError(f"address {vaddr:#x} is in no loaded segment")


def search_paths(data: bytes) -> list[SearchPath]:
    """The executable's RPATH / RUNPATH entries (none for a static or a relocatable build)."""
    return [e for e in _strings(data) if e.tag != "NEEDED"]


def needed(data: bytes) -> list[str]:
    """The shared libraries the executable links (DT_NEEDED: ``libpython3.11.so.1.0`` for a shared CPython)."""
    return [e.value for e in _strings(data) if e.tag == "NEEDED"]


def _strings(data: bytes) -> list[SearchPath]:
    if data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []
    dynamic: tuple[int, int] | None = None
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_offset, p_vaddr, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    strtab: int | None = None
    wanted: list[tuple[str, int]] = []
    for at in range(dynamic[0], dynamic[0] + dynamic[1] - 15, 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = value
        elif tag in _TAGS:
            wanted.append((_TAGS[tag], value))
    if not wanted:
        return []
    if strtab is None:
        raise ElfError("a search path without a string table")
    base = _vaddr_to_offset(loads, strtab)
    out = []
    for tag, index in wanted:
        start = base + index
        end = data.index(b"\0", start)
        out.append(SearchPath(tag, data[start:end].decode("utf-8", "surrogateescape"), start, end - start))
    return out


def set_search_path(path: Path, value: str) -> list[str]:
    """Replace every RPATH / RUNPATH of ``path`` by ``value`` in place; returns the old values. Raises
    :class:`ElfError` when ``value`` is longer than an old one (the string table cannot grow in place)."""
    data = bytearray(path.read_bytes())
    found = search_paths(bytes(data))
    new = value.encode()
    for entry in found:
        if len(new) > entry.size:
            raise ElfError(f"the new search path {value!r} is longer than the old {entry.value!r}")
        data[entry.offset : entry.offset + entry.size] = new + b"\0" * (entry.size - len(new))
    if found:
        path.write_bytes(bytes(data))
    return [e.value for e in found]
