#!/usr/bin/env python3
"""Regenerate kimi_serve/profile/data/sglang-0.5.23-flags.json from a real SGLang installation.

Run it with an interpreter that has SGLang (e.g. the CPU venv from scripts/build-cpu-venv.sh):
    $(scripts/build-cpu-venv.sh) scripts/gen-flag-table.py > kimi_serve/profile/data/sglang-0.5.23-flags.json
It records every option of SGLang's own CLI parser (`ServerArgs.add_cli_args`) and every `SGLANG_*` environment
name SGLang knows (the `Envs` registry, deprecated aliases, and names read directly from os.environ in its source).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def _type_name(t: object) -> str | None:
    if t is None:
        return None
    return getattr(t, "__name__", type(t).__name__)


def _jsonable(v: object) -> object:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def _choices(choices: object) -> list | None:
    if not choices:
        return None
    items = [_jsonable(c) for c in choices]  # type: ignore[union-attr]
    # a set's order changes from run to run; keep the table reproducible
    return sorted(items, key=str) if isinstance(choices, (set, frozenset)) else items


def main() -> int:
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options = []
    for action in parser._actions:
        if not action.option_strings or "--help" in action.option_strings:
            continue
        kind = type(action).__name__
        options.append(
            {
                "flags": list(action.option_strings),
                "dest": action.dest,
                "action": kind,
                "takes_value": action.nargs != 0,
                "nargs": action.nargs if isinstance(action.nargs, (int, str)) else None,
                "type": _type_name(action.type),
                "choices": _choices(action.choices),
                "default": _jsonable(action.default),
                "deprecated": kind.startswith("Deprecated") or "deprecated" in (action.help or "").lower()[:200],
            }
        )

    root = Path(sglang.__file__).parent
    env_names: set[str] = set()
    pattern = re.compile(r"\bSGLANG_[A-Z0-9_]+\b")
    for path in root.rglob("*.py"):
        env_names.update(pattern.findall(path.read_text(errors="replace")))
    try:
        from sglang.srt import environ

        env_names.update(n for n in vars(environ.Envs) if n.isupper())
    except Exception:  # noqa: BLE001 - older layouts: the source scan above still finds the names
        pass
    # Prefix-only matches such as "SGLANG_" from f-strings are not variable names.
    env_names = {n for n in env_names if not n.endswith("_")}

    table = {
        "sglang_version": sglang.__version__,
        "generator": "scripts/gen-flag-table.py",
        "options": options,
        "env": sorted(env_names),
    }
    json.dump(table, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
