"""Tool-call arguments from a JSON Schema, valid by construction, with values from the prompt where it names them.

``Values(root, prompt).value(schema, name, hints)`` walks the schema as a careful model writes arguments: ``$ref``
(pointers, anchors, ``$id``s; siblings kept), ``allOf`` merged, the first ``anyOf``/``oneOf`` branch the whole schema
accepts, ``const``/``enum``, objects, arrays, strings and numbers (schema_strings.py). Every candidate is checked with
jsonschema, so what leaves here validates; a schema nothing satisfies gets the closest attempt. Bounded whatever a
client sends (one :class:`ArgumentBudget` per turn): a schema beyond it raises ``TooCostly``, the request's 400
(docs/simulator.md "The scripted model").
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from kimi_serve.simulator.schema_refs import ids, merge, types
from kimi_serve.simulator.schema_strings import matches, number_value, string_value, takes_file

MAX_VALUES = 20_000  # values (objects, arrays, strings, numbers...) built for one turn's calls
MAX_CHARS = 1 << 20  # characters of generated strings in one turn (verify's largest probe asks for ~9 KB)
MAX_SECONDS = 3.0  # work on one turn's arguments (the generator checks it at each value it builds)
ENUM_TRIES = 16  # enum members validated before the first one is taken as it is


class TooCostly(ValueError):
    """The schema asks for more than the simulator builds within its bounds (a ValueError: SGLang's serving layer
    answers it with 400 and this message)."""


@dataclass
class ArgumentBudget:
    """What one turn's argument generation may still spend: values, characters and time."""

    values: int = MAX_VALUES
    chars: int = MAX_CHARS
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)

    def spend(self, values: int = 1, chars: int = 0) -> None:
        self.values -= values
        self.chars -= chars
        if self.values < 0:
            raise TooCostly(f"the arguments would need more than {MAX_VALUES} values (a schema without a finite end?)")
        if self.chars < 0:
            raise TooCostly(f"the arguments would need more than {MAX_CHARS} characters of strings")
        if time.monotonic() > self.deadline:
            raise TooCostly(f"building the arguments took more than {MAX_SECONDS:g} s")


DEEP = 3  # nesting depth after which optional parts are left out and recursion takes its way out
_OBJECT_KEYS = (
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
)
_ARRAY_KEYS = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains")
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class Values:
    def __init__(self, root: Any, prompt: str, budget: ArgumentBudget | None = None) -> None:
        self.root = root if isinstance(root, dict) else {}
        self.prompt = prompt
        self.budget = budget or ArgumentBudget()
        self._validator = _validator(self.root)
        self._ids = ids(self.root)

    # -- checking -------------------------------------------------------------------------------------------------
    def valid(self, schema: Any, value: Any) -> bool:
        if self._validator is None:
            return True
        try:
            return bool(self._validator.evolve(schema=schema).is_valid(value))
        except Exception:  # noqa: BLE001 - an unresolvable or broken schema is one this check cannot judge
            return True

    # -- references and merging -----------------------------------------------------------------------------------
    def deref(self, ref: str) -> Any:
        if ref in ("#", ""):
            return self.root
        base, _, fragment = ref.partition("#")
        doc: Any = self.root
        if base:
            doc = self._ids.get(base) or self._ids.get(base.rsplit("/", 1)[-1])
            if doc is None:
                return {}
        if not fragment:
            return doc
        if not fragment.startswith("/"):
            return self._ids.get("#" + fragment, {})
        for part in fragment.split("/")[1:]:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(doc, dict) and part in doc:
                doc = doc[part]
            elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
                doc = doc[int(part)]
            else:
                return {}
        return doc

    def flat(self, schema: Any, hops: int = 0) -> dict[str, Any]:
        """``schema`` with its ``$ref`` chain followed (siblings kept) and ``allOf`` merged in."""
        if schema is False:
            return {"not": {}}
        if not isinstance(schema, dict):
            return {}
        out = dict(schema)
        while "$ref" in out and hops < 32:
            target = self.deref(str(out.pop("$ref")))
            out = merge(target if isinstance(target, dict) else {}, out)
            hops += 1
        for part in out.pop("allOf", None) or []:
            out = merge(out, self.flat(part, hops + 1))
        return out

    # -- values -----------------------------------------------------------------------------------------------------
    def value(
        self,
        schema: Any,
        name: str,
        hints: list[str],
        min_chars: int = 0,
        depth: int = 0,
        variant: int = 0,
        must: tuple[Any, ...] = (),
    ) -> Any:
        """A value for ``schema`` (``must``: enclosing schemas a scalar must meet too, e.g. a oneOf's others)."""
        if schema is False or depth > 40:
            return None
        self.budget.spend()
        s = self.flat(schema)
        if "const" in s:
            return s["const"]
        if isinstance(s.get("enum"), list) and s["enum"]:
            return self._enum(s, variant, must)
        for key in ("oneOf", "anyOf"):
            if isinstance(s.get(key), list) and s[key]:
                return self._choice(s, key, name, hints, min_chars, depth, variant, must)
        kind = _kind(s)
        if kind == "null":
            return None
        if kind == "boolean":
            return variant % 2 == 0
        if kind in ("integer", "number"):
            cands = number_value(s, self.prompt, kind == "integer", variant)
            return next((c for c in cands if self.valid(s, c) and all(self.valid(m, c) for m in must)), cands[0])
        if kind == "object":
            return self._object(s, hints, min_chars, depth, variant)
        if kind == "array":
            return self._array(s, name, hints, depth)
        needed = max(min_chars, _count(s.get("minLength")))
        if needed > self.budget.chars:
            raise TooCostly(f"a string of at least {needed} characters (minLength) is more than the simulator writes")
        made = string_value(s, name, self.prompt, hints, min_chars, variant)
        self.budget.spend(0, len(made))
        return made

    def _enum(self, s: dict[str, Any], variant: int, must: tuple[Any, ...]) -> Any:
        """The member the prompt names, else the ``variant``-th one the schema accepts; only ``ENUM_TRIES`` members
        are validated (a 16k-member enum is not checked member by member against the whole schema)."""
        members: list[Any] = s["enum"]
        lowered = self.prompt.lower()
        named = [e for e in members if isinstance(e, str) and e and e.lower() in lowered and _mentions(self.prompt, e)]
        order = (named[:ENUM_TRIES] if not variant else []) + [
            members[(variant + i) % len(members)] for i in range(min(ENUM_TRIES, len(members)))
        ]
        for e in order:
            self.budget.spend()
            if self.valid(s, e) and all(self.valid(m, e) for m in must):
                return e
        return members[variant % len(members)]

    def _choice(
        self,
        s: dict[str, Any],
        key: str,
        name: str,
        hints: list[str],
        min_chars: int,
        depth: int,
        variant: int,
        must: tuple[Any, ...],
    ) -> Any:
        rest = {k: v for k, v in s.items() if k != key}
        branches = [self.flat(b) for b in s[key]]
        deep = depth >= DEEP
        order = sorted(
            range(len(branches)), key=lambda i: ((_recursive(branches[i]) if deep else _kind(branches[i]) == "null"), i)
        )
        first: Any = None
        for n, i in enumerate(order):
            candidate = self.value(merge(branches[i], rest), name, hints, min_chars, depth, variant, (*must, s))
            if n == 0:
                first = candidate
            if self.valid(s, candidate):
                return candidate
        return first

    def _object(self, s: dict[str, Any], hints: list[str], min_chars: int, depth: int, variant: int) -> Any:
        props = _dict(s.get("properties"))
        keys = [k for k in dict.fromkeys(s.get("required") or []) if isinstance(k, str)]
        if not keys and props and depth < DEEP:
            keys = list(props)[:1]
        for k in list(keys):  # dependentRequired pulls in more keys
            keys += [d for d in (s.get("dependentRequired") or {}).get(k, []) if d not in keys]
        low, high = int(s.get("minProperties", 0)), s.get("maxProperties")
        if low > self.budget.values:
            raise TooCostly(f"an object of at least {low} properties (minProperties) is more than the simulator writes")
        for k in props:
            if len(keys) >= low:
                break
            if k not in keys:
                keys.append(k)
        required = set(s.get("required") or [])
        if high is not None:
            keys = [k for k in keys if k in required] + [k for k in keys if k not in required]
            keys = keys[: max(int(high), len(required))]
        extra = 0
        while len(keys) < low and extra < low + 8:
            self.budget.spend()
            key = self._extra_key(s, extra)
            extra += 1
            if key is not None and key not in keys:
                keys.append(key)
        long_key = long_text_key(props, keys) if min_chars else None
        out: dict[str, Any] = {}
        cursor = 0  # each string property takes the next prompt value (a path takes the file name, no other value)
        for k in keys:
            sub = self._property_schema(s, k)
            own = hints[cursor:]
            if _kind(self.flat(sub)) == "string":
                taken = takes_file(k, self.prompt, own)
                if taken is None:
                    cursor += 1
                else:  # the file name is the path's: not the content's as well
                    hints = hints[:cursor] + [h for h in hints[cursor:] if h != taken]
            out[k] = self.value(
                sub,
                k,
                own,
                min_chars if k == long_key else 0,
                depth + 1,
                variant if k == (keys[0] if keys else None) else 0,
            )
        return out

    def _property_schema(self, s: dict[str, Any], key: str) -> Any:
        props = _dict(s.get("properties"))
        if key in props:
            return props[key]
        for pattern, sub in (s.get("patternProperties") or {}).items():
            if matches(pattern, key):
                return sub
        extra = s.get("additionalProperties")
        return extra if isinstance(extra, dict) else {}

    def _extra_key(self, s: dict[str, Any], n: int) -> str | None:
        patterns = list((s.get("patternProperties") or {}).items())
        if patterns:
            return string_value({"pattern": patterns[n % len(patterns)][0]}, "key", "", [], 0, n // len(patterns))
        if s.get("additionalProperties") is False:
            return None
        names = self.flat(s.get("propertyNames", {}))
        key = string_value({**names, "type": "string"}, "key", "", [], 0, n) if names else f"key{n + 1}"
        return key if self.valid(names, key) else None

    def _array(self, s: dict[str, Any], name: str, hints: list[str], depth: int) -> list[Any]:
        items = s.get("items")
        prefix: list[Any] = s["prefixItems"] if isinstance(s.get("prefixItems"), list) else []
        if isinstance(items, list):  # draft 4-2019: items as a tuple, additionalItems after it
            prefix, items = items, s.get("additionalItems", {})
        rest = {} if items is None else items
        low, high = int(s.get("minItems", 0)), s.get("maxItems")
        count = low if depth >= DEEP else max(low, 1)
        if high is not None:
            count = min(count, int(high))
        if rest is False:
            count = min(count, len(prefix))
        if count > self.budget.values:
            raise TooCostly(f"an array of at least {count} items (minItems) is more than the simulator writes")
        contains = s.get("contains")
        out: list[Any] = []
        seen: set[str] = set()
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else rest
            if i == 0 and isinstance(contains, dict):
                sub = merge(self.flat(sub), self.flat(contains))
            for variant in range(i, i + 12):
                item = self.value(sub, name, hints[variant:], 0, depth + 1, variant)
                if not s.get("uniqueItems") or _key(item) not in seen:
                    break
            seen.add(_key(item))
            out.append(item)
        return out


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    """A count keyword's value (minLength, minItems...) as an int; 0 for what is none."""
    try:
        return int(value) if isinstance(value, (int, float)) and value == value and abs(value) != float("inf") else 0
    except (OverflowError, ValueError):
        return 0


def _kind(s: dict[str, Any]) -> str:
    declared = types(s.get("type"))
    if declared:
        return next((t for t in declared if t != "null"), "null")
    if "const" in s or "enum" in s or "oneOf" in s or "anyOf" in s:
        return "any"
    for keys, kind in (
        (_OBJECT_KEYS, "object"),
        (_ARRAY_KEYS, "array"),
        (_STRING_KEYS, "string"),
        (_NUMBER_KEYS, "number"),
    ):
        if any(k in s for k in keys):
            return kind
    return "string"


def _recursive(s: dict[str, Any]) -> bool:
    """A branch that goes on (a reference, an object or array) rather than ending the recursion here."""
    return "$ref" in json.dumps(s) or _kind(s) in ("object", "array")


def _mentions(prompt: str, value: str) -> bool:
    if value.isascii():
        return bool(re.search(rf"(?<![\w]){re.escape(value)}(?![\w])", prompt, re.IGNORECASE))
    return value in prompt


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def long_text_key(props: dict[str, Any], keys: list[str]) -> str | None:
    """The string property a long text goes into ("at least N characters", "every integer from A to B")."""
    strings = [
        k
        for k in keys
        if k in props
        and isinstance(props[k], dict)
        and (props[k].get("type") or "string") == "string"
        and not props[k].get("enum")
    ]
    preferred = [k for k in ("content", "text", "body", "message", "code", "data") if k in strings]
    return (preferred or strings or [None])[0]


def _validator(root: dict[str, Any]) -> Any:
    try:
        import jsonschema

        cls = jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
        return cls(root)
    except Exception:  # noqa: BLE001 - no jsonschema, or a schema it cannot load: generation goes on unchecked
        return None
