"""What one profile key is (:class:`Key`: its type, default, range and meaning) and whether a value fits it
(:func:`value_problem`, said alike for the file and for --set). The keys: :mod:`kimi_serve.profile.schema`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.text import line_breaker, string_problem

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# A scalar "type" is one of: "str", "int", "float", "bool", "path" (absolute path string), "str_map", "str_list",
# "names" (one name or a list of names; typed as a tuple, a single string becoming a 1-tuple, null the empty one).


@dataclass(frozen=True)
class Key:
    type: str
    doc: str
    default: Any = None
    required: bool = False
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    nullable: bool | None = None  # None: null is allowed exactly when the default is null and the key optional

    def __post_init__(self) -> None:
        if self.nullable is None:
            object.__setattr__(self, "nullable", self.default is None and not self.required)


def value_problem(key: Key, value: Any) -> str | None:
    """None if ``value`` fits ``key``; else a description of what was expected (the loader says it for the file
    and for --set alike). A number is range-checked here only, and NaN or an infinity is never in range."""
    if value is None:
        return None if key.nullable and not key.required else "a value (null is not allowed here)"
    t = key.type
    if t in ("str", "path"):
        if not isinstance(value, str):
            return "a string"
        choice = key.choices and value not in key.choices
        return string_problem(value, path=t == "path") or (
            "one of " + ", ".join(map(str, key.choices or ())) if choice else None
        )
    if t == "bool":
        return None if isinstance(value, bool) else "true or false"
    if t in ("int", "float"):
        ok = isinstance(value, int) if t == "int" else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            return "an integer" if t == "int" else "a number"
        lo, hi = key.min, key.max
        if not math.isfinite(value) and lo is None and hi is None:
            return "a finite number"
        # NaN compares false with everything: only a finite value can be in range
        if not math.isfinite(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
            lo_s, hi_s = ("" if b is None else str(int(b)) if t == "int" else f"{b:g}" for b in (lo, hi))
            return f"{'an integer' if t == 'int' else 'a number'} in {lo_s}..{hi_s}"
        return None
    if t == "str_list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "a list of strings"
        if any(line_breaker(v) for v in value):
            return "strings without control characters (newline, CR, NUL, tab, ...)"
        return None
    if t == "names":  # one name or a list of names, each once
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(v, str) and v for v in names):
            return "a name or a list of names"
        bad = next((p for p in (string_problem(v, path=False) for v in names) if p), None)
        return bad or ("each name once" if len(set(names)) != len(names) else None)
    if t == "str_map":
        if not isinstance(value, dict):
            return "a mapping of NAME: value"
        for k, v in value.items():
            if not isinstance(k, str) or not _ENV_NAME.match(k):
                return f"valid variable names (got {k!r})"
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                return f'string values (quote {k}\'s value, e.g. "1")'
            if line_breaker(str(v)):
                return f"single-line values without control characters ({k} has {line_breaker(str(v))!r})"
        return None
    raise AssertionError(f"unknown schema type {t}")
