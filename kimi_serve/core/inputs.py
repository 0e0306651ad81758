"""Bounds on what a file or a user's JSON or YAML may make kimi-serve do: how large a file it reads, how deep it
nests, how far YAML aliases expand, and how much of a bad value an error message repeats.

Every file kimi-serve reads (a profile, ``--set``, a key file, a workload, ``--perf-model``, a manifest, its own
records and journals) is read (:func:`read_regular`, :func:`read_text`: regular files only, never blocking on a FIFO)
and decoded (:func:`load_json`, :func:`load_yaml`) here. A hostile file ends in one line naming it and exit 2, in
time and memory linear in the bound: never a RecursionError, a "billion laughs" alias bomb, a file read whole, or a
ValueError from a 5000-digit integer.
"""

from __future__ import annotations

import json
import os
import reprlib
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 32  # nesting levels of a user's JSON or YAML (a profile uses 3: section, key, list)
MAX_NODES = 20_000  # YAML values once every alias is expanded (a shipped profile has about 150)
MAX_FILE_BYTES = 4 * 1024 * 1024  # a profile, a manifest, a record: a few KB (a bench workload has its own bound)


class InputBoundError(ValueError):
    """A file beyond one of the bounds: what, the fix, and ``line`` and ``column`` (1-based) where YAML can tell."""

    def __init__(self, message: str, hint: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.hint, self.line, self.column = hint, line, column


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a socket or a directory: reading it could block forever or never end. ``kind``
    says which ("a FIFO")."""

    def __init__(self, path: str | Path, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.kind = kind


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words ("a FIFO", "a directory", ...)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def read_regular(path: str | Path, limit: int = MAX_FILE_BYTES) -> tuple[os.stat_result, bytes]:
    """``(its status, its first limit + 1 bytes)``, opened without blocking (a FIFO would hold the open until a writer
    came) and read only when it is a regular file (a symlink to one is fine: Kubernetes mounts Secrets so); more than
    ``limit`` bytes back means the file is over the bound. Raises :class:`NotRegularFile` or the open's OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, file_kind(st.st_mode))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return st, handle.read(limit + 1)
    finally:
        os.close(fd)


def too_large(limit: int) -> InputBoundError:
    return InputBoundError(f"over {limit} bytes", f"a file of this kind is a few KB: keep it under {limit} bytes")


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_regular`): InputBoundError (a ValueError) past
    ``limit`` bytes, UnicodeDecodeError (a ValueError) when it is not UTF-8, OSError (FileNotFoundError,
    :class:`NotRegularFile`) when it cannot be read."""
    data = read_regular(path, limit)[1]
    if len(data) > limit:
        raise too_large(limit)
    return data.decode("utf-8")


def read_json(path: str | Path, limit: int = MAX_FILE_BYTES) -> Any:
    """:func:`load_json` of :func:`read_text` (ValueError: over the bounds or not JSON; OSError: unreadable)."""
    return load_json(read_text(path, limit))


def _too_deep(line: int | None = None, column: int | None = None) -> InputBoundError:
    return InputBoundError(
        f"nested deeper than {MAX_DEPTH} levels",
        f"flatten it: at most {MAX_DEPTH} levels of lists and mappings",
        line,
        column,
    )


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 8, 8, 8
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 100, 100, 40


def short_repr(value: Any) -> str:
    """``repr(value)`` for an error message: bounded however large or deep (or alias-shared) the value is."""
    text = _SHORT.repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def depth_of(value: Any) -> int:
    """How deep lists and mappings nest in ``value`` (a scalar is 0), without recursion; stops past MAX_DEPTH."""
    deepest, stack = 0, [(value, 0)]
    seen: set[int] = set()
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if depth + 1 > MAX_DEPTH:
                return depth + 1
            if id(item) in seen:  # shared (a YAML alias): its depth below was counted where first met
                deepest = max(deepest, depth + 1)
                continue
            seen.add(id(item))
            deepest = max(deepest, depth + 1)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def load_json(text: str | bytes) -> Any:
    """``json.loads`` with the depth bound: InputBoundError (a ValueError) past MAX_DEPTH levels."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise _too_deep() from None
    if depth_of(data) > MAX_DEPTH:
        raise _too_deep()
    return data


def _scalar_guard(tag: str) -> Any:
    """SafeLoader's constructor for ``tag``, with a bad value (a 5000-digit integer, the date 2026-13-45) a YAML error
    at its line instead of a ValueError."""
    plain = yaml.SafeLoader.yaml_constructors[tag]

    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        try:
            return plain(loader, node)
        except (ValueError, OverflowError) as exc:
            message = str(exc).split(";")[0]
            problem = f"cannot read {short_repr(node.value)}: {message}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None

    return construct


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader with the depth bound while composing (its composer recurses once per level)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _too_deep(mark.line + 1, mark.column + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


for _tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"):
    BoundedLoader.add_constructor(_tag, _scalar_guard(_tag))


def expanded_size(node: yaml.Node) -> int:
    """How many values ``node`` stands for once every alias is expanded, each distinct node counted once (linear in
    the file); InputBoundError past MAX_NODES or for an alias inside the value it names (a loop)."""
    sizes: dict[int, int] = {}  # finished nodes
    open_: set[int] = set()  # nodes on the current path
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:  # post-order: a node's size once all its children have theirs
        item, children_done = stack.pop()
        if not isinstance(item, (yaml.SequenceNode, yaml.MappingNode)):
            continue
        mark = item.start_mark
        if children_done:
            open_.discard(id(item))
            total = 1 + sum(sizes.get(id(c), 1) for c in _children(item))
            if total > MAX_NODES:
                raise InputBoundError(
                    f"the YAML holds more than {MAX_NODES} values once its aliases are expanded",
                    "a profile holds a few hundred: write the values out instead of aliases of aliases",
                    mark.line + 1,
                    mark.column + 1,
                )
            sizes[id(item)] = total
            continue
        if id(item) in open_:
            raise InputBoundError(
                "a YAML alias refers to the value that contains it",
                "move the alias out of its anchor's value",
                mark.line + 1,
                mark.column + 1,
            )
        if id(item) in sizes:
            continue
        open_.add(id(item))
        stack.append((item, True))
        stack.extend((child, False) for child in _children(item))
    return sizes.get(id(node), 1)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml(text: str, check: Callable[[yaml.Node], None] | None = None) -> tuple[Any, yaml.Node | None]:
    """One YAML document, safely constructed, and its node tree (lines): within MAX_DEPTH levels and MAX_NODES values
    after aliases (InputBoundError), any other problem a ``yaml.YAMLError``. ``check`` sees the tree as written
    (duplicate keys) before construction, which flattens ``<<`` merges into the mappings."""
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        expanded_size(node)
        if check is not None:
            check(node)
        return loader.construct_document(node), node
    finally:
        loader.dispose()
