"""The one report protocol: what every command's result is built from, and how it becomes JSON and text.

- :class:`Grade`, the one status vocabulary: a ``Finding`` (core/findings.py) spells it ``"fail"``, an
  :class:`Action` ``"failed"`` (:data:`ACTION_WORDS`); docs/json.md documents both, :meth:`Grade.of` reads either.
- :func:`to_json` derives every result's JSON from its dataclass: field names are the keys unless
  ``field(metadata=json_meta(key=..., omit=..., encode=...))`` says otherwise (:func:`rounded` rounds a figure);
  computed keys come from the class's ``JSON_PROPERTIES``, constant ones first from its ``JSON_HEAD``.
- :func:`finding_lines` / :func:`action_lines` / :func:`fact_lines`: the one text form of findings, actions, facts.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePath
from typing import Any, Literal, NamedTuple


class Grade(enum.StrEnum):
    """The one status vocabulary of findings and actions (docs/json.md)."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    PLANNED = "planned"  # an action not taken yet (a dry run's plan); no finding is planned

    @classmethod
    def of(cls, word: str) -> Grade:
        """Either spelling back to its status: ``"fail"`` and ``"failed"`` are both :attr:`FAIL`."""
        found = _BY_WORD.get(str(word))
        if found is None:
            raise ValueError(f"not a status: {word!r}")
        return found

    @property
    def action_word(self) -> str:
        """How an action's JSON spells it: done | warning | failed | skipped | planned."""
        return ACTION_WORDS[self]

    @property
    def mark(self) -> str:
        """The four-character word a text line starts with: ``ok  ``, ``WARN``, ``FAIL``, ``skip``, ``plan``."""
        return _MARKS[self]


ACTION_WORDS = {
    Grade.PASS: "done",
    Grade.WARN: "warning",
    Grade.FAIL: "failed",
    Grade.SKIP: "skipped",
    Grade.PLANNED: "planned",
}
_MARKS = {Grade.PASS: "ok  ", Grade.WARN: "WARN", Grade.FAIL: "FAIL", Grade.SKIP: "skip", Grade.PLANNED: "plan"}
_BY_WORD = {**{s.value: s for s in Grade}, **{w: s for s, w in ACTION_WORDS.items()}}


@dataclasses.dataclass
class Action:
    """Something a command did, plans, failed at or skipped (``install-service``'s steps): ``status`` is its verb
    form (``done``, ``planned``, ``failed``, ``skipped``, ``warning``); a :class:`Grade` given is spelled so."""

    action: str
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        self.status = Grade.of(self.status).action_word  # refuses a word outside the vocabulary

    @property
    def outcome(self) -> Grade:
        return Grade.of(self.status)


class Fact(NamedTuple):
    """A named value a report states (a figure, a path, a version; `status`'s rows): a pair, so a ``(name, value)``
    row is one too."""

    name: str
    value: Any


# --- JSON -----------------------------------------------------------------------------------------------------------

_KEY, _OMIT, _ENCODE, _OMIT_NONE = "json_key", "json_omit", "json_encode", "json_omit_none"


def json_meta(
    *, key: str | None = None, omit: bool = False, encode: Callable[[Any], Any] | None = None, omit_none: bool = False
) -> dict[str, Any]:
    """A field's JSON declaration, for ``dataclasses.field(metadata=...)``: ``key`` where the documented key differs
    from the field's name, ``omit`` to leave it out, ``encode`` to turn the value into what is documented (a rounding,
    a name), ``omit_none`` to leave the key out when the value is None."""
    meta = {_KEY: key, _OMIT: omit or None, _ENCODE: encode, _OMIT_NONE: omit_none or None}
    return {k: v for k, v in meta.items() if v is not None}


def to_json(value: Any) -> Any:
    """``value`` as JSON data: a dataclass as an object (its fields, then its ``JSON_PROPERTIES``), an enum as its
    value, a path as a string, a mapping as an object, a list, tuple or set as a list; None, bools, numbers and
    strings as they are."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = dict(getattr(type(value), "JSON_HEAD", {}))
        for f in dataclasses.fields(value):
            meta = f.metadata
            if meta.get(_OMIT):
                continue
            item = getattr(value, f.name)
            if _ENCODE in meta:
                item = meta[_ENCODE](item)
            if item is None and meta.get(_OMIT_NONE):
                continue
            out[meta.get(_KEY, f.name)] = to_json(item)
        for prop in getattr(type(value), "JSON_PROPERTIES", ()):
            key, item = (prop[0], prop[1](value)) if isinstance(prop, tuple) else (prop, getattr(value, prop))
            out[key] = to_json(item)
        return out
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Fact):
        return {"name": value.name, "value": to_json(value.value)}
    if isinstance(value, Mapping):
        return {_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    raise TypeError(f"no JSON form for {type(value).__name__}")


def rounded(ndigits: int | None = None) -> Callable[[Any], Any]:
    """The encoder of a figure rounded to ``ndigits`` (None: to a whole number, an int); None stays None."""
    return lambda v: None if v is None else round(v, ndigits)


def _key(k: Any) -> str:
    """A mapping's key as json.dumps writes it (``true``, ``null``, ``1``)."""
    return json.dumps(k) if k is None or isinstance(k, bool) else str(to_json(k))


# --- text -----------------------------------------------------------------------------------------------------------


def finding_lines(
    findings: Iterable[Any],
    *,
    word: Literal["mark", "upper"] = "mark",
    label: Literal["layer", "code"] = "layer",
    width: int = 0,
    sep: str = " ",
    fix_below: bool = False,
    indent: str = "",
) -> list[str]:
    """Each finding (a :class:`~kimi_serve.core.findings.Finding`) as one line: the status (``word`` "mark": ``ok  ``,
    ``WARN``..., "upper": ``PASS``, ``WARN``...), ``sep``, the label (``[layer]``; ``code:``; or, with ``width``, the
    code in a column that wide), then what it says with its fix (``line()``). ``fix_below``: the message alone, and
    the fix of a warning or failure on a line of its own under it."""
    out = []
    for f in findings:
        status = Grade.of(f.status)
        head = status.mark if word == "mark" else status.value.upper()
        tag = f"[{f.layer}]" if label == "layer" else f.code.ljust(width) if width else f"{f.code}:"
        out.append(f"{indent}{head}{sep}{tag} {f.message if fix_below else f.line()}")
        if fix_below and f.fix and status in (Grade.WARN, Grade.FAIL):
            out.append(f"{indent}{' ' * (len(head) + len(sep) + width)} fix: {f.fix}")
    return out


def fact_lines(facts: Iterable[tuple[str, Any]], *, width: int = 13) -> list[str]:
    """Each fact as ``name:`` in a column ``width`` wide, then its value (`status`)."""
    return [f"{name + ':':{width}} {value}" for name, value in facts]


def action_lines(actions: Iterable[Action]) -> list[str]:
    """Each action as ``ok   ACTION: DETAIL`` (``plan``, ``FAIL``, ``skip``, ``WARN``)."""
    return [f"{a.outcome.mark} {a.action}" + (f": {a.detail}" if a.detail else "") for a in actions]
