#!/usr/bin/env python3
"""Print the key reference table of docs/profiles.md from kimi_serve/profile/schema.py (the single source of truth)."""

from kimi_serve.profile.schema import SECTIONS, TOP_LEVEL_ONLY


def fmt(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if v == {} or v == []:
        return "`" + repr(v) + "`"
    return f"`{v}`"


def main() -> None:
    print("| key | type | default | meaning |")
    print("|---|---|---|---|")
    print(
        "| `extends` | str | null | Parent profile: a name (looked up beside this file, then on the profile "
        "path) or a file path. Sections merge key by key; a child's `env` entry set to null removes it. Cycles "
        "and missing parents are errors. |"
    )
    for section, keys in SECTIONS.items():
        for name, k in keys.items():
            path = f"{section}.{name}" if section else name
            t = k.type + (f" ({'/'.join(map(str, k.choices))})" if k.choices else "")
            if k.min is not None or k.max is not None:
                num = (lambda x: str(int(x))) if k.type == "int" else (lambda x: f"{x:g}")
                t += f" in {'' if k.min is None else num(k.min)}..{'' if k.max is None else num(k.max)}"
            default = "required" if k.required else fmt(k.default)
            print(f"| `{path}` | {t} | {default} | {k.doc} |")
    assert {"extends"} == TOP_LEVEL_ONLY


if __name__ == "__main__":
    main()
