"""``--set KEY=VALUE``: per-run overrides applied on top of a profile's ``extends`` chain, validated like the file.

KEY is a dotted key path (``server.port``, ``speculative.enabled``, ``env.NCCL_DEBUG``); VALUE is read as YAML
(``8080`` an integer, ``true`` a boolean, ``[a, b]`` a list, ``''`` an empty string, nothing at all null). The loader
validates the result with the schema, so a typo gets the same did-you-mean as in a file; breadcrumbs name ``--set``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.inputs import InputBoundError, load_yaml, short_repr
from kimi_serve.core.text import line_breaker

WHERE = "--set"


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``["server.port=8080", "env.X=1"]`` -> ``{"server": {"port": 8080}, "env": {"X": 1}}`` (later wins)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        bad = line_breaker(item)
        if bad is not None:  # YAML would fold a newline into a space, but the item itself is recorded in the unit
            raise KimiServeError(
                f"the --set item {item!r} contains control character {bad!r}",
                where=f"{WHERE} {repr(key) if line_breaker(key) else key}",
                hint="pass the value on one line without control characters (newline, CR, NUL, tab)",
            )
        parts = key.split(".")
        if not sep or not key or any(not p for p in parts) or len(parts) > 2:
            raise KimiServeError(
                f"expected KEY=VALUE with a dotted key such as server.port, got {item!r}",
                where=WHERE,
                hint="write e.g. --set server.port=8080",
            )
        try:
            value = load_yaml(raw)[0] if raw.strip() else None
        except InputBoundError as exc:
            raise KimiServeError(f"the value of {key} is {exc}", where=f"{WHERE} {key}", hint=exc.hint) from None
        except yaml.YAMLError:
            raise KimiServeError(
                f"the value of {key} is not valid YAML: {short_repr(raw)}",
                where=f"{WHERE} {key}",
                hint=f"quote it: --set {key}='\"{raw}\"'" if len(raw) <= 100 else "quote it as a YAML string",
            ) from None
        if len(parts) == 1:
            out[key] = value
            continue
        section = out.setdefault(parts[0], {})
        if not isinstance(section, dict):
            raise KimiServeError(
                f"{parts[0]} is set as a whole and by key",
                where=f"{WHERE} {key}",
                hint=f"use only --set {parts[0]}.KEY=VALUE",
            )
        section[parts[1]] = value
    return out
