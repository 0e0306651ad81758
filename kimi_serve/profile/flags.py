"""SGLang's CLI as data: the committed flag table of SGLang 0.5.23 and an argv checker over it.

The table (kimi_serve/profile/data/sglang-0.5.23-flags.json) is dumped from SGLang's own parser by
scripts/gen-flag-table.py.
It lets `render` and `check` catch what SGLang would reject (or, worse, silently accept) without importing SGLang:
abbreviated flags (argparse's allow_abbrev makes `--cuda-graph-max-bs` ambiguous, `--tool-call` a silent prefix),
deprecated spellings, unknown flags, bad choices and types, and `SGLANG_*` variables that SGLang does not know.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kimi_serve.core.pin import SGLANG_VERSION as TARGET_SGLANG

_TABLE = Path(__file__).resolve().parent / "data" / f"sglang-{TARGET_SGLANG}-flags.json"

# What replaces each deprecated spelling (shown in the fix).
_REPLACEMENTS = {
    "--enable-flashinfer-allreduce-fusion": "--flashinfer-allreduce-fusion-backend trtllm (or auto)",
    "--disable-cuda-graph": "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled",
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode N",
    "--enable-dp-attention": "the data-parallel attention flags of this SGLang version",
}


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    dest: str
    takes_value: bool
    nargs: Any
    type: str | None
    choices: tuple[Any, ...] | None
    deprecated: bool


@dataclass(frozen=True)
class FlagTable:
    sglang_version: str
    options: dict[str, Option]  # every spelling -> option
    env: frozenset[str]


@cache
def load_flag_table(path: Path = _TABLE) -> FlagTable:
    raw = json.loads(path.read_text(encoding="utf-8"))
    options: dict[str, Option] = {}
    for o in raw["options"]:
        choices = tuple(o["choices"]) if o["choices"] else None
        fields = (o["dest"], bool(o["takes_value"]), o["nargs"], o["type"], choices, bool(o["deprecated"]))
        opt = Option(tuple(o["flags"]), *fields)
        for f in opt.flags:
            options[f] = opt
    return FlagTable(raw["sglang_version"], options, frozenset(raw["env"]))


@dataclass(frozen=True)
class ArgProblem:
    flag: str
    message: str
    fix: str


def _value_problem(opt: Option, flag: str, value: str) -> ArgProblem | None:
    if opt.choices is not None and value not in [str(c) for c in opt.choices]:
        shown = ", ".join(str(c) for c in opt.choices[:12]) + (", ..." if len(opt.choices) > 12 else "")
        return ArgProblem(flag, f"invalid value {value!r}", f"use one of {shown}")
    try:
        if opt.type == "int":
            int(value)
        elif opt.type == "float":
            float(value)
    except ValueError:
        kind = "an integer" if opt.type == "int" else "a number"
        return ArgProblem(flag, f"expected {kind}, got {value!r}", f"give {flag} a numeric value")
    return None


def check_argv(args: Sequence[str], table: FlagTable | None = None) -> list[ArgProblem]:
    """Check SGLang server flags (no interpreter/module part) against the table; empty list = all good."""
    table = table or load_flag_table()
    problems: list[ArgProblem] = []
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            problems.append(ArgProblem(token, "stray value without a flag", "remove it or put the flag before it"))
            continue
        flag, eq, inline = token.partition("=")
        opt = table.options.get(flag)
        if opt is None:
            # the full flags it is a prefix of: what argparse's allow_abbrev would silently pick or reject
            longer = sorted(f for f in table.options if f.startswith(flag) and f != flag)
            if longer:
                fix = _REPLACEMENTS.get(flag, f"write the full name: {' or '.join(longer[:3])}")
                said = "abbreviated flag (argparse would guess, or reject it as ambiguous)"
                problems.append(ArgProblem(flag, said, fix))
            else:
                close = difflib.get_close_matches(flag, list(table.options), n=1)
                fix = f"did you mean {close[0]}?" if close else "remove it"
                problems.append(ArgProblem(flag, f"unknown to SGLang {table.sglang_version}", fix))
            # skip its value(s) so they are not reported as stray
            while i < len(args) and not args[i].startswith("--"):
                i += 1
            continue
        if opt.deprecated:
            problems.append(ArgProblem(flag, "deprecated spelling", _REPLACEMENTS.get(flag, "use its replacement")))
        if opt.dest in seen:
            problems.append(ArgProblem(flag, f"given twice (also as {seen[opt.dest]})", "keep one"))
        seen[opt.dest] = flag
        values: list[str] = []
        if eq:
            values = [inline]
        elif opt.takes_value:
            if opt.nargs in ("+", "*"):
                while i < len(args) and not args[i].startswith("--"):
                    values.append(args[i])
                    i += 1
            elif i < len(args):
                values = [args[i]]
                i += 1
        if not opt.takes_value and values:
            problems.append(ArgProblem(flag, "takes no value", f"write just {flag}"))
            continue
        if opt.takes_value and not values and opt.nargs != "?":
            problems.append(ArgProblem(flag, "missing value", f"give {flag} a value"))
            continue
        for v in values:
            p = _value_problem(opt, flag, v)
            if p:
                problems.append(p)
                break
    return problems


def unknown_sglang_env(names: Sequence[str], table: FlagTable | None = None) -> list[str]:
    """``SGLANG_*`` names this SGLang does not read (SGLang ignores them silently)."""
    table = table or load_flag_table()
    return sorted(n for n in names if n.startswith("SGLANG_") and n not in table.env)
