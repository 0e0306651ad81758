"""String and number values for a JSON Schema: formats, patterns, lengths, bounds, multipleOf.

Strings prefer the prompt's values (a hint that satisfies the schema), then a format example, then a pattern example
(regex_example.py), then a default named after the property; lengths are met by padding with prose and cutting.
Numbers prefer the prompt's numbers that satisfy the bounds, then the smallest value the bounds and multipleOf allow.
The caller (schema_values.py) checks every value against the whole schema; these functions only make it likely.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

from kimi_serve.simulator.regex_example import example

FILLER = (
    "Kimi-K2.5 simulated output keeps going with plain deterministic prose so that long arguments can be checked "
    "end to end by a real client. "
)
FORMATS: dict[str, list[str]] = {  # formats format_example does not compute: a few fixed examples each
    "idn-hostname": ["example.com", "api.example.com", "www.example.org"],
    "uri-reference": ["https://example.com/", "/path/a", "/path/b"],
    "iri-reference": ["https://example.com/", "/path/a", "/path/b"],
    "uri-template": ["https://example.com/{id}", "https://example.com/{name}", "/items/{id}"],
    "json-pointer": ["/a", "/b", "/a/0"],
    "relative-json-pointer": ["0", "1", "0/a"],
    "regex": ["^[a-z]+$", "^[0-9]+$", ".*"],
    "byte": ["ZXhhbXBsZQ==", "a2ltaQ==", "dGVzdA=="],
    "binary": ["example", "kimi", "test"],
    "password": ["example-password", "kimi-password", "test-password"],
}
_FORMAT_SHAPES = {
    "date": r"^\d{4}-\d{2}-\d{2}$",
    "date-time": r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}",
    "email": r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
    "idn-email": r"^[^@\s]+@[^@\s]+$",
    "uri": r"^[a-zA-Z][\w+.-]*:\S+$",
    "url": r"^https?://\S+$",
    "ipv4": r"^(\d{1,3}\.){3}\d{1,3}$",
    "hostname": r"^[A-Za-z0-9.-]+\.[A-Za-z]{2,}$",
    "uuid": r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$",
}
_PATH_KEYS = {"path", "file", "filename", "filepath", "absolutepath", "targetfile"}  # compared as plain() gives
FILE_LIKE = re.compile(r"(?<![\w/.])((?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,8})(?![\w/])")
_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?![\w.])")


def pad(text: str, min_chars: int) -> str:
    while len(text) < min_chars:
        text += " " + FILLER
    return text


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fits_string(schema: dict[str, Any], value: str) -> bool:
    """The length, pattern and (known) format rules of ``schema`` hold for ``value``."""
    if len(value) < int(schema.get("minLength", 0)):
        return False
    if "maxLength" in schema and len(value) > int(schema["maxLength"]):
        return False
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not matches(pattern, value):
        return False
    shape = _FORMAT_SHAPES.get(str(schema.get("format", "")))
    return shape is None or bool(re.search(shape, value))


def matches(pattern: str, text: str) -> bool:
    """``re.search`` that takes a pattern Python cannot compile as no match."""
    try:
        return bool(re.search(pattern, text))
    except re.error:
        return False


def string_value(
    schema: dict[str, Any], name: str, prompt: str, hints: list[str], min_chars: int, variant: int = 0
) -> str:
    """A string for property ``name``: ``variant`` > 0 asks for a different one (uniqueItems)."""
    lo = max(min_chars, int(schema.get("minLength", 0)))
    hi = int(schema["maxLength"]) if "maxLength" in schema else None
    strict = {k: schema[k] for k in ("pattern", "format") if k in schema}
    for hint in _prompt_values(name, prompt, hints)[variant:]:
        if strict and fits_string(schema, hint):
            return hint
        if not strict:
            return _sized(hint, lo, hi, variant)
    made_fmt = format_example(str(schema.get("format", "")), variant)
    if made_fmt is not None and fits_string(schema, made_fmt):
        return made_fmt
    if isinstance(schema.get("pattern"), str):
        made = example(schema["pattern"], lo + variant if hi is None or lo + variant <= hi else lo, hi)
        if made is not None:
            return made
    default = schema.get("default")
    if isinstance(default, str) and not variant and fits_string(schema, default):
        return default  # the schema's own value for a parameter the prompt gives nothing for
    return _sized(_default(name, prompt) + (f" {variant + 1}" if variant else ""), lo, hi, variant)


def format_example(fmt: str, variant: int = 0) -> str | None:
    """A value in format ``fmt`` (None: not a format known here); each ``variant`` gives a different one."""
    n = variant
    day = datetime.date(2025, 1, 15) + datetime.timedelta(days=n)
    clock = (datetime.datetime(2025, 1, 15, 9, 30) + datetime.timedelta(minutes=n)).strftime("%H:%M:%S")
    made = {
        "date": day.isoformat(),
        "date-time": f"{day.isoformat()}T{clock}Z",
        "time": f"{clock}Z",
        "duration": f"P{n + 1}D",
        "email": f"user{n or ''}@example.com",
        "idn-email": f"user{n or ''}@example.com",
        "hostname": f"host{n}.example.com" if n else "example.com",
        "ipv4": f"192.0.2.{1 + n % 254}",
        "ipv6": f"2001:db8::{n + 1:x}",
        "uri": f"https://example.com/{n or ''}",
        "url": f"https://example.com/{n or ''}",
        "iri": f"https://example.com/{n or ''}",
        "uuid": f"123e4567-e89b-12d3-a456-{426614174000 + n:012d}",
    }
    listed = FORMATS.get(fmt, [])
    return made.get(fmt) or (listed[n] if n < len(listed) else None)


def takes_file(name: str, prompt: str, hints: list[str]) -> str | None:
    """The file name a path-like property ``name`` takes: the first value offered that is one (repeated calls get the
    prompt's values in turn), else the prompt's first; None for other properties or without a file name."""
    if plain(name) not in _PATH_KEYS:
        return None
    named = [h for h in hints if FILE_LIKE.fullmatch(h)] + FILE_LIKE.findall(prompt)
    return named[0] if named else None


def plain(name: str) -> str:
    """A parameter name without its naming style: ``filePath``, ``file_path`` and ``file-path`` are ``filepath``."""
    return re.sub(r"[\W_]+", "", name).lower()


def _prompt_values(name: str, prompt: str, hints: list[str]) -> list[str]:
    file = takes_file(name, prompt, hints)
    return list(hints) if file is None else [file] + [h for h in hints if h != file]


def _default(name: str, prompt: str) -> str:
    if name in {"pattern", "glob"}:
        return "*"
    if plain(name) in _PATH_KEYS | {"directory", "dir"}:
        return "."
    if name in {"query", "q", "search", "text", "prompt", "question"}:
        return clip(prompt, 80) or name
    return ""  # the type's empty value: no placeholder text that would pass for a real value


def _sized(value: str, lo: int, hi: int | None, variant: int) -> str:
    value = pad(value, lo)
    if hi is not None and len(value) > hi:
        value = value[:hi]
        if variant and hi > 0:  # keep variants apart after the cut
            value = value[: hi - 1] + "abcdefghijklmnopqrstuvwxyz"[variant % 26]
    return value


def number_value(schema: dict[str, Any], prompt: str, integer: bool, variant: int = 0) -> list[int | float]:
    """Candidate numbers, best first: the prompt's, then what the bounds and multipleOf allow (the caller keeps the
    first one the schema accepts)."""
    lo, lo_open = _bound(schema, "minimum", "exclusiveMinimum")
    hi, hi_open = _bound(schema, "maximum", "exclusiveMaximum")
    step = schema.get("multipleOf")
    step = float(step) if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0 else None
    found = [float(x) for x in _NUMBER.findall(prompt)]
    base: list[float] = list(found)
    if lo is not None:
        base.append(lo + (_tick(step, integer) if lo_open else 0))
        if step:
            base.append(math.ceil(lo / step) * step)
            base.append((math.floor(lo / step) + 1) * step)
    if hi is not None:
        base.append(hi - (_tick(step, integer) if hi_open else 0))
        if step:
            base.append(math.floor(hi / step) * step)
    if lo is not None and hi is not None:
        base.append((lo + hi) / 2)
    base += [1, 0, 2, 10, 100, 1.5, 0.5]
    if step:
        base += [step, 2 * step, float(math.ceil(step)) * 10]
    out: list[int | float] = []
    for value in base:
        value += variant * (step or 1)
        out.append(int(math.ceil(value)) if integer else float(value))
    return list(dict.fromkeys(out))


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    ex = schema.get(exclusive)
    if isinstance(ex, bool):  # draft 4: a flag on minimum/maximum
        value = schema.get(inclusive)
        return (float(value), ex) if isinstance(value, (int, float)) else (None, False)
    limits = []
    if isinstance(schema.get(inclusive), (int, float)):
        limits.append((float(schema[inclusive]), False))
    if isinstance(ex, (int, float)):
        limits.append((float(ex), True))
    if not limits:
        return None, False
    pick = max if inclusive == "minimum" else min
    return pick(limits, key=lambda p: (p[0], p[1] if inclusive == "minimum" else not p[1]))


def _tick(step: Any, integer: bool) -> float:
    if isinstance(step, (int, float)) and step > 0:
        return float(step)
    return 1.0 if integer else 0.5
