"""Streamed deltas merged the way the official openai Python SDK merges them (``openai.lib.streaming``'s
``accumulate_delta``, used by ``ChatCompletionStreamState``), so verify reads a stream as clients do, plus the reason
whenever that merge raises, drops a fragment or garbles a field. No openai import: verify stays a light client; the
test suite (tests/test_verify_sdk_agreement.py) holds this mirror to the real SDK on the same bytes.

The SDK's rules: a key first seen is stored as is; later ``index`` and ``type`` values replace it; strings are
concatenated (so an ``id``, ``name`` or ``role`` repeated in every chunk becomes ``"call_1call_1"``); numbers add;
objects merge recursively; lists of objects are merged by each entry's ``index`` (an entry without one raises, a
non-integer one raises, an index past the end is appended and then cannot be found); a value whose type differs from
the one stored is dropped. ``None`` never replaces a stored value, except for ``index`` and ``type``.

Strings grow as lists of pieces (:class:`Text`) and are joined once by :func:`finish`, so a stream of 100,000
one-character deltas merges in linear time; a list grows to at most :data:`MAX_TOOL_CALLS` indexed entries, and an
index below 0 is a fault (the SDK's ``list.insert(-1, ...)`` puts such a call before the last one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kimi_serve.verify.wire import shown

# Keys clients read as identifiers: concatenating a repeat garbles them (content and arguments are meant to grow).
_IDENTIFIERS = frozenset({"id", "name", "role"})
MAX_TOOL_CALLS = 128  # entries of one indexed list (tool calls of one answer); Kimi makes a handful per turn


class Text:
    """A string being merged: its pieces, joined once at the end (:func:`finish`)."""

    __slots__ = ("parts",)

    def __init__(self, *parts: str) -> None:
        self.parts = list(parts)

    def __bool__(self) -> bool:
        return any(self.parts)

    def __str__(self) -> str:
        joined = "".join(self.parts)
        self.parts = [joined]
        return joined


def finish(value: Any) -> Any:
    """``value`` with every :class:`Text` joined into its string (the merged message as the SDK holds it)."""
    if isinstance(value, Text):
        return str(value)
    if isinstance(value, dict):
        return {k: finish(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finish(v) for v in value]
    return value


@dataclass
class Merge:
    """What went wrong while merging, as (code, message) pairs, each code once."""

    faults: list[tuple[str, str]] = field(default_factory=list)
    _plain: dict[int, tuple[list[Any], bool]] = field(default_factory=dict)  # id -> (the list, only str/numbers)

    def primitive(self, stored: list[Any]) -> bool:
        """The SDK's test before it extends a list (all strings and numbers), remembered so a long one costs once
        (the list is held with its answer, so its id is not reused)."""
        if id(stored) not in self._plain:
            self._plain[id(stored)] = (stored, all(isinstance(x, str | int | float) for x in stored))
        return self._plain[id(stored)][1]

    def extend(self, stored: list[Any], value: list[Any]) -> None:
        plain = self.primitive(stored) and all(isinstance(x, str | int | float) for x in value)
        self._plain[id(stored)] = (stored, plain)
        stored.extend(value)

    def forget(self, stored: list[Any]) -> None:
        self._plain.pop(id(stored), None)

    def has(self, code: str) -> bool:
        return any(c == code for c, _ in self.faults)

    def add(self, code: str, message: str) -> None:
        if not self.has(code):
            self.faults.append((code, message))


def _type_name(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        Text: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _has_indexed_entries(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(e, dict) and "index" in e for e in value)


def _merge_list(acc: list[Any], delta: list[Any], path: str, merge: Merge) -> bool:
    """Merge indexed entries into ``acc``; False where the SDK raises (the stream cannot be accumulated)."""
    for entry in delta:
        if not isinstance(entry, dict):
            merge.add(
                "stream_tool_delta",
                f"a `{path}` delta entry is {_type_name(entry)}, not an object: the openai SDK raises TypeError on it",
            )
            return False
        if "index" not in entry:
            merge.add(
                "stream_tool_index",
                f"a streamed `{path}` delta has no `index`: the openai SDK raises "
                '("Expected list delta entry to have an `index` key") and the call is lost',
            )
            return False
        index = entry["index"]
        if not isinstance(index, int) or isinstance(index, bool):
            merge.add(
                "stream_tool_index",
                f"a streamed `{path}` delta has index {shown(index)}, not an integer: the openai SDK raises TypeError",
            )
            return False
        if index < 0:
            merge.add(
                "stream_tool_index",
                f"a streamed `{path}` delta has index {index}: indices count up from 0, and the openai SDK inserts "
                "such a call before the last one it holds (or fails to find it)",
            )
            return False
        if index < len(acc):
            if not isinstance(acc[index], dict):
                return False
            acc[index] = merge_delta(acc[index], entry, f"{path}[{index}]", merge)
        elif index == len(acc) and index >= MAX_TOOL_CALLS:
            merge.add(
                "too_many_tool_calls",
                f"the stream sends more than {MAX_TOOL_CALLS} `{path}` entries: verify stops merging there (an "
                "endless or runaway answer)",
            )
            return False
        elif index == len(acc):
            acc.append(merge_delta({}, entry, f"{path}[{index}]", merge))
        else:
            merge.add(
                "stream_tool_index",
                f"`{path}` index {index} arrives before index {len(acc)}: the openai "
                f"SDK stores it at position {len(acc)} and then fails to find it (IndexError); indices must "
                "count up from 0",
            )
            return False
    return True


def merge_delta(acc: dict[str, Any], delta: dict[str, Any], path: str, merge: Merge) -> dict[str, Any]:
    """``acc`` with ``delta`` merged in (the SDK's ``accumulate_delta``); faults go to ``merge``."""
    for key, value in delta.items():
        where = f"{path}.{key}" if path else key
        if key not in acc or acc[key] is None:
            if _has_indexed_entries(value):
                acc[key] = []
            else:
                acc[key] = value
                continue
        stored = acc[key]
        if key in ("index", "type"):
            if key == "type" and value is None and stored is not None:
                merge.add(
                    "stream_type_reset",
                    f"a later `{where}` delta sends null: the openai SDK takes it as the "
                    f"new type (was {shown(stored)}), so the call loses its type",
                )
            acc[key] = value
            continue
        if isinstance(stored, str | Text) and isinstance(value, str):
            if key in _IDENTIFIERS and value and not merge.has("stream_repeated_field") and stored:
                merge.add(
                    "stream_repeated_field",
                    f"`{where}` is sent again in a later chunk ({value!r}): clients "
                    f"that accumulate deltas (the openai SDK) concatenate it to {str(stored)[:160] + value!r}",
                )
            if isinstance(stored, str):
                acc[key] = Text(stored, value)
            else:
                stored.parts.append(value)
        elif isinstance(stored, (int, float)) and isinstance(value, (int, float)):
            acc[key] = stored + value
        elif isinstance(stored, dict) and isinstance(value, dict):
            acc[key] = merge_delta(stored, value, where, merge)
        elif isinstance(stored, list) and isinstance(value, list):
            if merge.primitive(stored) and (stored or not _has_indexed_entries(value)):
                merge.extend(stored, value)
            else:
                merge.forget(stored)  # it takes indexed entries now (at most MAX_TOOL_CALLS)
                if not _merge_list(stored, value, where, merge):
                    merge.add("stream_unmergeable", f"the openai SDK cannot merge the `{where}` deltas")
        elif value is not None:
            merge.add(
                "stream_type_change",
                f"`{where}` changes from {_type_name(stored)} to {_type_name(value)} "
                "mid-stream: the openai SDK keeps the first and silently drops the rest",
            )
    return acc
