"""A string that matches a JSON Schema ``pattern``: a small deterministic regex-to-example generator.

It walks the tree of Python's own regex parser (JSON Schema's ECMA-262 patterns mean the same for the subset tool
schemas use) taking the first choice that fits at each node; ``extra`` adds repetitions to the first repeats that may
grow (how a minLength is met). Lookarounds are not generated for, so every result is checked with ``re.search``.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

_c: Any = importlib.import_module("re._constants")  # kimi-serve needs Python >= 3.11, where the parser lives here
_p: Any = importlib.import_module("re._parser")

_MAX_REPEAT = 10_000  # a pattern that needs more repetitions than this gets no example (the caller falls back)
_PREFERRED = "example0123456789EXAMPLEbcdfghijkmnoqrstuvwyz_-. "
_CATEGORY = {  # a category's example character, and the class it stands for
    _c.CATEGORY_DIGIT: ("1", r"\d"),
    _c.CATEGORY_NOT_DIGIT: ("a", r"\D"),
    _c.CATEGORY_SPACE: (" ", r"\s"),
    _c.CATEGORY_NOT_SPACE: ("a", r"\S"),
    _c.CATEGORY_WORD: ("a", r"\w"),
    _c.CATEGORY_NOT_WORD: ("-", r"\W"),
}


def example(pattern: str, min_len: int = 0, max_len: int | None = None) -> str | None:
    """A string matching ``pattern`` with min_len <= len <= max_len, or None (unparseable, or none found)."""
    try:
        tree = _p.parse(pattern)
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    for extra in _extras(min_len):
        text = _Walker(extra).run(tree)
        if text is None or not compiled.search(text):
            continue
        if len(text) >= min_len and (max_len is None or len(text) <= max_len):
            return text
        if max_len is not None and len(text) > max_len:
            break
    return None


def _extras(min_len: int) -> list[int]:
    steps = [0, 1, 2, 3, 5, 8]
    steps += list(range(10, min_len + 2, max(1, min_len // 40)))
    return sorted(set(steps + [min_len, min_len + 1]))


class _Walker:
    def __init__(self, extra: int) -> None:
        self.extra = extra
        self.groups: dict[int, str] = {}

    def run(self, tree: Any) -> str | None:
        try:
            return self.seq(list(tree))
        except (_Impossible, RecursionError):
            return None

    def seq(self, items: list[tuple[Any, Any]]) -> str:
        return "".join(self.node(op, av) for op, av in items)

    def node(self, op: Any, av: Any) -> str:
        if op is _c.LITERAL:
            return chr(av)
        if op is _c.NOT_LITERAL:
            return next(ch for ch in _PREFERRED if ord(ch) != av)
        if op is _c.ANY:
            return "a"
        if op is _c.IN:
            return _pick(av)
        if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):  # anchors and lookarounds: nothing generated (checked after)
            return ""
        if op is _c.BRANCH:
            return self.seq(list(av[1][0]))
        if op is _c.SUBPATTERN:
            group, body = av[0], av[-1]
            text = self.seq(list(body))
            if group is not None:
                self.groups[group] = text
            return text
        if op is getattr(_c, "ATOMIC_GROUP", None):
            return self.seq(list(av))
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) or op is getattr(_c, "POSSESSIVE_REPEAT", None):
            low, high, body = av
            if low > _MAX_REPEAT:
                raise _Impossible("repeat too long")
            grow = min(self.extra, (high - low) if high is not _c.MAXREPEAT else self.extra)
            self.extra -= grow
            return "".join(self.seq(list(body)) for _ in range(low + grow))
        if op is _c.GROUPREF:
            return self.groups.get(av, "")
        if op is _c.GROUPREF_EXISTS:
            group, yes, no = av
            return self.seq(list(yes)) if group in self.groups else (self.seq(list(no)) if no else "")
        if op is _c.CATEGORY:
            return _CATEGORY.get(av, ("a", ""))[0]
        raise _Impossible(str(op))


class _Impossible(Exception):
    pass


def _allows(items: list[tuple[Any, Any]], ch: str) -> bool:
    negate = bool(items) and items[0][0] is _c.NEGATE
    hit = False
    for op, av in items[1:] if negate else items:
        if op is _c.LITERAL:
            hit = hit or ord(ch) == av
        elif op is _c.RANGE:
            hit = hit or av[0] <= ord(ch) <= av[1]
        elif op is _c.CATEGORY and av in _CATEGORY:
            hit = hit or bool(re.fullmatch(_CATEGORY[av][1], ch))
    return hit != negate


def _pick(items: list[tuple[Any, Any]]) -> str:
    for ch in _PREFERRED:
        if _allows(items, ch):
            return ch
    for op, av in items:
        if op is _c.LITERAL and _allows(items, chr(av)):
            return chr(av)
        if op is _c.RANGE and _allows(items, chr(av[0])):
            return chr(av[0])
    for code in range(33, 0x3000):
        if _allows(items, chr(code)):
            return chr(code)
    raise _Impossible("empty class")
