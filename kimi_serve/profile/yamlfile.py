"""Read one profile file: YAML syntax, duplicate keys and the line of every key, as one-line errors ``FILE:LINE: key``.

A key given twice in one mapping is an error (YAML would silently keep the last one); a section left empty (``server:``
with nothing or only comments under it) reads as null, which the loader treats as "overrides nothing".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.inputs import InputBoundError, load_yaml, read_text


def _check_duplicates(node: Any, prefix: str, file: str, seen_nodes: set[int] | None = None) -> None:
    """Walk a composed YAML tree; raise for the first key given twice in one mapping (any depth). A node an alias
    repeats is walked once (``seen_nodes``), so the walk is linear in the file, however often an alias is used."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        if id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
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
            _check_duplicates(v, kp, file, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicates(item, prefix, file, seen_nodes)


def read_yaml(path: Path, shown: str) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse one file (``shown`` is how errors name it); return its mapping and the 1-based line of every key path
    (top-level keys and the keys of each section)."""
    try:
        text = read_text(path)  # a regular file within MAX_FILE_BYTES (a FIFO or /dev/zero is refused, not read)
    except InputBoundError as exc:
        raise KimiServeError(f"the profile is {exc}", where=shown, hint=exc.hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KimiServeError(
            f"cannot read profile: {exc}", where=shown, hint="check the path and permissions"
        ) from None
    try:
        data, node = load_yaml(text, lambda tree: _check_duplicates(tree, "", shown))
    except InputBoundError as exc:
        loc = f"{shown}:{exc.line}:{exc.column}" if exc.line else shown
        raise KimiServeError(str(exc), where=loc, hint=exc.hint) from None
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
