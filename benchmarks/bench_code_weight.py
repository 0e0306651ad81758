#!/usr/bin/env python3
"""How much code the product spends, and how many forms its concepts take (docs/architecture.md, issue "one model per
concept"): package lines, leaf commands and lines per command, modules over the 400-line room size, hand-written
``to_json`` methods, ``--json`` branches in commands/, and the parallel forms of a member that the member model
replaced (each listed with where it still appears, if anywhere).

Reads the source only; imports the CLI (no sglang, no torch) to count its commands.

Usage: benchmarks/bench_code_weight.py [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "kimi_serve"
sys.path.insert(0, str(REPO))

ROOM_LINES = 400  # no module over this (docs/architecture.md)
# The parallel forms of a member the issue named; a form counts while its definition (or its idiom) is in the package.
MEMBER_FORMS = {
    "class MemberUnit": r"^class MemberUnit\b",
    "up's class Part": r"^class Part\b",
    "MemberReport's own name": r"^class MemberReport\b(?s:.*?)^\s+name: str",
    "front_member": r"\bdef front_member\b",
    "deployment_targets (index-0 router)": r"\bdef deployment_targets\b",
    "deployment_units": r"\bdef deployment_units\b",
    "is_member / member_order": r"\bdef (is_member|member_order)\b",
    "targets[1][1]": r"targets\[1\]\[1\]",
    "Fleet's router/routed/replicas mirrors": r"^class Fleet\b(?s:.*?)def routed\b",
}


def _sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _leaf_commands() -> int:
    import typer

    from kimi_serve.cli import app

    def count(cmd: object) -> int:
        sub = getattr(cmd, "commands", None)  # a group (click's, or the one Typer carries)
        return sum(count(c) for c in sub.values()) if isinstance(sub, dict) else 1

    return count(typer.main.get_command(app))


def measure() -> dict[str, object]:
    files = _sources()
    lines = {p.relative_to(PKG).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    total = sum(lines.values())
    commands = _leaf_commands()
    text = {p: p.read_text(encoding="utf-8") for p in files}
    to_json = sum(len(re.findall(r"^\s+def to_json\(", t, re.M)) for t in text.values())
    json_branches = sum(
        len(re.findall(r"^\s+(?:if|elif)\b[^\n]*\b(?:as_json|json_out|json)\b[^\n]*:\s*$", t, re.M))
        for p, t in text.items()
        if p.parent.name == "commands"
    )
    forms = {}
    for name, pattern in MEMBER_FORMS.items():
        where = [p.relative_to(PKG).as_posix() for p, t in text.items() if re.search(pattern, t, re.M)]
        forms[name] = where
    return {
        "package_lines": total,
        "modules": len(files),
        "leaf_commands": commands,
        "lines_per_command": round(total / commands),
        "modules_over_room": {k: v for k, v in sorted(lines.items(), key=lambda kv: -kv[1]) if v > ROOM_LINES},
        "to_json_methods": to_json,
        "json_branches_in_commands": json_branches,
        "member_forms_left": {k: v for k, v in forms.items() if v},
        "member_forms_gone": [k for k, v in forms.items() if not v],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON document")
    args = ap.parse_args()
    m = measure()
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    print(f"package lines        {m['package_lines']:>7}  ({m['modules']} modules)")
    print(f"leaf commands        {m['leaf_commands']:>7}")
    print(f"lines per command    {m['lines_per_command']:>7}")
    print(f"to_json methods      {m['to_json_methods']:>7}")
    print(f"json branches (cmds) {m['json_branches_in_commands']:>7}")
    over = m["modules_over_room"]
    assert isinstance(over, dict)
    print(f"modules over {ROOM_LINES}     {len(over):>7}  " + ", ".join(f"{k} {v}" for k, v in over.items()))
    left = m["member_forms_left"]
    assert isinstance(left, dict)
    print(f"member forms left    {len(left):>7}  " + "; ".join(f"{k} ({', '.join(v)})" for k, v in left.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
