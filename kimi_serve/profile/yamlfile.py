"""Read one profile file: YAML syntax, duplicate keys and the line of every key, as one-line errors ``FILE:LINE: key``.

A key given twice in one mapping is an error (YAML would silently keep the last one); a section left empty (``server:``
with nothing or only comments under it) reads as null, which the loader treats as "overrides nothing".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kimi_serve.core.errors import KimiServeError


def _check_duplicates(node: Any, prefix: str, file: str) -> None:
    """Walk a composed YAML tree; raise for the first key given twice in one mapping (any depth)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else "?"
            kp = f"{prefix}.{key}" if prefix else key
            line = k.start_mark.line + 1
            if key in seen and key != "<<":
                raise KimiServeError(
                    f"key {key!r} is given twice in one mapping (first on line {seen[key]})",
                    where=f"{file}:{line}: {kp}",
                    hint="keep one of them (YAML would silently use the last)",
                )
            seen[key] = line
            _check_duplicates(v, kp, file)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicates(item, prefix, file)


def read_yaml(path: Path, shown: str) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse one file (``shown`` is how errors name it); return its mapping and the 1-based line of every key path
    (top-level keys and the keys of each section)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KimiServeError(
            f"cannot read profile: {exc}", where=shown, hint="check the path and permissions"
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_duplicates(node, "", shown)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise KimiServeError(
            f"YAML syntax error: {problem}", where=loc, hint="fix the YAML at that line and column"
        ) from None
    except yaml.YAMLError as exc:
        raise KimiServeError(f"YAML error: {str(exc).splitlines()[0]}", where=shown, hint="fix the YAML") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise KimiServeError(
            f"a profile must be a mapping of keys, got {type(data).__name__}",
            where=shown,
            hint="start the file with keys such as 'model:' and 'server:'",
        )
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                lines[str(k.value)] = k.start_mark.line + 1
                if isinstance(v, yaml.MappingNode):
                    for k2, _ in v.value:
                        if isinstance(k2, yaml.ScalarNode):
                            lines[f"{k.value}.{k2.value}"] = k2.start_mark.line + 1
    return data, lines
