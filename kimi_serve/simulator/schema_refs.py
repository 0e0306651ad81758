"""JSON Schema plumbing for schema_values.py: merging two schemas' constraints (allOf, ``$ref`` with siblings) and
finding the subschemas a document names by ``$id`` or ``$anchor``."""

from __future__ import annotations

from typing import Any

_MIN_KEYS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_MAX_KEYS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Both schemas' constraints in one (what allOf and ``$ref`` + siblings mean), as far as generation needs."""
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
        elif key == "properties" and isinstance(value, dict) and isinstance(out[key], dict):
            props = dict(out[key])
            for p, sub in value.items():
                props[p] = {"allOf": [props[p], sub]} if p in props else sub
            out[key] = props
        elif key == "required":
            out[key] = list(dict.fromkeys([*out[key], *value]))
        elif key == "type":
            mine = types(out[key])
            theirs = types(value)
            both = [t for t in mine if t in theirs or (t == "integer" and "number" in theirs)]
            both += [t for t in theirs if t == "integer" and "number" in mine and t not in both]
            out[key] = both or mine
        elif key == "enum" and isinstance(value, list):
            out[key] = [e for e in out[key] if e in value] or value
        elif key in _MIN_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = max(out[key], value)
        elif key in _MAX_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = min(out[key], value)
        elif key in ("anyOf", "oneOf"):
            out["allOf"] = [*out.get("allOf", []), {key: value}]
        elif key in ("$defs", "definitions"):
            out[key] = {**value, **out[key]}
    return out


def types(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


def ids(root: dict[str, Any]) -> dict[str, Any]:
    """Subschemas by ``$id`` and ``$anchor`` (as written and by their last path segment), for references to them."""
    found: dict[str, Any] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("$id", "id"):
                ident = node.get(key)
                if isinstance(ident, str) and ident:
                    found.setdefault(ident.rstrip("#"), node)
                    found.setdefault(ident.rstrip("#").rsplit("/", 1)[-1], node)
            if isinstance(node.get("$anchor"), str):
                found.setdefault("#" + node["$anchor"], node)
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(root)
    return found
