"""Load a YAML profile: syntax, `extends:` chains, schema validation, defaults -> an immutable :class:`Profile`.

Errors are :class:`KimiServeError` with a breadcrumb ``FILE:LINE: key.path`` and a fix. Cross-field rules of the
deployment live in :mod:`kimi_serve.check.rules`, not here.
"""

from __future__ import annotations

import copy
import difflib
import errno
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.inputs import short_repr
from kimi_serve.core.resources import resource_dir
from kimi_serve.core.text import line_breaker
from kimi_serve.profile.schema import SECTIONS, TOP_LEVEL_ONLY, Key, value_problem
from kimi_serve.profile.sections import SECTION_TYPES, ProfileKeys
from kimi_serve.profile.yamlfile import read_yaml

_MAX_EXTENDS_DEPTH = 16
_KNOWN_SHOWN = 12  # profiles a "no profile named" hint lists
_NAME_MAX, _PATH_MAX = 255, 4095  # bytes of a file name and of a path (Linux NAME_MAX, PATH_MAX - 1)
BUILTIN_PREFIX = "builtin:"  # `extends: builtin:prod` names the shipped profile, whatever the search path holds
# Keys whose empty value (`server:` with nothing under it) means "overrides nothing", never "reset to defaults".
_CONTAINERS = frozenset(
    [*(s for s in SECTIONS if s), *(k for k, v in SECTIONS[""].items() if v.type in ("str_map", "str_list"))]
)


@dataclass(frozen=True)
class Profile(ProfileKeys):
    """A loaded profile: its typed keys and sections (:class:`ProfileKeys`, generated from the schema) and where they
    came from."""

    name: str
    source: Path
    data: Mapping[str, Any]  # fully merged, defaults filled, no `extends`
    chain: tuple[Path, ...] = field(default=())  # the file and its ancestors, child first
    lines: Mapping[str, str] = field(default_factory=dict)  # key path -> "file:line" where it was set
    overrides: tuple[str, ...] = field(default=())  # the --set KEY=VALUE items applied last, as given
    ref: str = ""  # --profile as the user typed it (hints repeat it)

    def where(self, key_path: str) -> str:
        """Breadcrumb for a key: ``configs/prod.yaml:12: server.port`` (the file that set it, else the profile)."""
        loc = self.lines.get(key_path) or display_path(self.source)
        return f"{loc}: {key_path}"

    def cli_args(self) -> str:
        """``--profile REF [--set K=V ...]`` as the user typed them, shell-quoted (for fix hints)."""
        parts = ["--profile", self.ref or self.name] + [a for o in self.overrides for a in ("--set", o)]
        return shlex.join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dict(_thaw(self.data))  # fresh containers all the way down: the caller may change it


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value


def display_path(path: Path) -> str:
    """A path as a user would write it: relative to the working directory when inside it, else absolute with links
    resolved (a shipped profile shows as .../configs/prod.yaml, not through kimi_serve/_data)."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)


def _exists(candidate: Path, name_or_path: str) -> bool:
    """``candidate.is_file()``, with a name the filesystem cannot hold (or a directory it may not search) a one-line
    error instead of an OSError."""
    try:
        return candidate.is_file()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise KimiServeError(
                f"profile {short_repr(name_or_path)} is longer than the filesystem allows",
                hint=f"use a file name of at most {_NAME_MAX} bytes (a path of at most {_PATH_MAX})",
            ) from None
        raise KimiServeError(
            f"cannot look up profile {short_repr(name_or_path)}: {exc.strerror}",
            hint="check the path and the permissions of its directories",
        ) from None


def find_profile(name_or_path: str, *, relative_to: Path | None = None, skip: Path | None = None) -> Path:
    """Resolve ``--profile`` (or ``extends:``): an existing file path, or a NAME looked up as NAME.yaml (next to the
    extending file, then the search path). ``builtin:NAME`` is the shipped profile. ``skip`` (the extending file
    itself) is passed over, so a ``prod.yaml`` with ``extends: prod`` extends the next ``prod`` on the search path."""
    builtin = name_or_path.startswith(BUILTIN_PREFIX)
    name = name_or_path[len(BUILTIN_PREFIX) :] if builtin else name_or_path
    shown = short_repr(name_or_path)
    looks_like_path = "/" in name or name.endswith((".yaml", ".yml"))
    if looks_like_path and not builtin:
        bad = line_breaker(name)
        if bad is not None:
            raise KimiServeError(
                f"profile path {shown} contains control character {bad!r}",
                hint="pass the path of an existing YAML file, on one line",
            )
        try:
            candidate = Path(name).expanduser()
        except RuntimeError:  # ~user of a user that does not exist
            raise KimiServeError(
                f"profile path {shown}: no such user's home", hint="write the path without ~ or with an existing user"
            ) from None
        if not candidate.is_absolute() and relative_to is not None:
            candidate = relative_to / candidate
        if _exists(candidate, name_or_path):
            return candidate
        raise KimiServeError(
            f"profile file {shown} does not exist",
            hint="pass an existing YAML file or a profile name such as 'prod'",
        )
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise KimiServeError(
            f"invalid profile name {shown}", hint="use a name like 'prod', 'builtin:prod' or a file path"
        )
    if len(name) + len(".yaml") > _NAME_MAX:
        raise KimiServeError(
            f"profile name {shown} is longer than the filesystem allows",
            hint=f"use a name of at most {_NAME_MAX - len('.yaml')} characters",
        )
    from kimi_serve.core.settings import current

    # next to the extending file, then $KIMI_SERVE_PROFILE_PATH (colon-separated), then the shipped configs/
    dirs = [] if builtin else [*([] if relative_to is None else [relative_to]), *current().profile_path]
    dirs.append(resource_dir("configs"))
    skipped = skip.resolve() if skip is not None else None
    for d in dirs:
        for ext in (".yaml", ".yml"):
            candidate = d / f"{name}{ext}"
            if _exists(candidate, name_or_path) and candidate.resolve() != skipped:
                return candidate
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.y*ml")})
    if skipped is not None and skipped.stem == name:
        raise KimiServeError(
            f"extends {shown} names this file itself and no other profile {name!r} is on the search path",
            hint=f"extend another profile, e.g. '{BUILTIN_PREFIX}prod'",
        )
    close = difflib.get_close_matches(name, known, n=1)
    listed = ", ".join(known[:_KNOWN_SHOWN]) + (f", ... ({len(known)} in all)" if len(known) > _KNOWN_SHOWN else "")
    hint = f"did you mean {close[0]!r}?" if close else f"known profiles: {listed or 'none'}"
    raise KimiServeError(f"no profile named {shown}", hint=hint)


def _merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in child.items():
        if value is None and key in _CONTAINERS:  # `server:` left empty (or only comments): overrides nothing
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            merged = {**out[key]}
            for k2, v2 in value.items():
                if key == "env" and v2 is None:  # `KEY: null` in a child removes an inherited variable
                    merged.pop(k2, None)
                else:
                    merged[k2] = copy.deepcopy(v2)
            out[key] = merged
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_chain(path: Path) -> tuple[dict[str, Any], tuple[Path, ...], dict[str, str]]:
    chain: list[Path] = []
    layers: list[tuple[Path, dict[str, Any], dict[str, int]]] = []
    current = path
    while True:
        resolved = current.resolve()
        if resolved in chain:
            cycle = " -> ".join(display_path(p) for p in [*chain, resolved])
            raise KimiServeError(f"extends cycle: {cycle}", where=display_path(path), hint="remove one of the extends")
        if len(chain) >= _MAX_EXTENDS_DEPTH:
            raise KimiServeError("extends chain too deep", where=display_path(path), hint="flatten the profiles")
        chain.append(resolved)
        data, lines = read_yaml(current, display_path(current))
        layers.append((current, data, lines))
        parent = data.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str) or not parent.strip():
            raise KimiServeError(
                "extends must be a profile name or file path",
                where=f"{display_path(current)}:{lines.get('extends', 1)}: extends",
                hint="write e.g. 'extends: prod'",
            )
        try:
            current = find_profile(parent, relative_to=current.parent, skip=current)
        except KimiServeError as exc:
            exc.where = f"{display_path(current)}:{lines.get('extends', 1)}: extends"
            raise
    merged: dict[str, Any] = {}
    where: dict[str, str] = {}
    for file, data, lines in reversed(layers):
        body = {k: v for k, v in data.items() if k != "extends"}
        merged = _merge(merged, body)
        for kp, line in lines.items():
            where[kp] = f"{display_path(file)}:{line}"
    return merged, tuple(chain), where


def suggest(word: str, options: list[str]) -> str:
    """The did-you-mean of every "unknown NAME" error: the closest option, else the allowed ones."""
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(sorted(options))}"


def _validate(data: dict[str, Any], where: dict[str, str], source: Path) -> dict[str, Any]:
    def loc(kp: str) -> str:
        section = kp.split(".")[0]
        shown = kp if len(kp) <= 100 and line_breaker(kp) is None else short_repr(kp)  # a key is the user's text
        return f"{where.get(kp) or where.get(section) or display_path(source)}: {shown}"

    top_keys = list(SECTIONS[""]) + [s for s in SECTIONS if s] + sorted(TOP_LEVEL_ONLY)
    out: dict[str, Any] = {}
    for key in data:
        if not isinstance(key, str) or key not in top_keys:
            raise KimiServeError(
                f"unknown key {short_repr(key)}", where=loc(str(key)), hint=suggest(str(key), top_keys)
            )
    for key, spec in SECTIONS[""].items():
        value = data.get(key)
        if value is None and (key not in data or key in _CONTAINERS):  # `env:` left empty: nothing set
            value = copy.deepcopy(spec.default)
        # a bad env value is named by its own key (env.NAME)
        sub = [f"{key}.{k}" for k, v in value.items() if line_breaker(str(v))] if isinstance(value, dict) else []
        _check(spec, value, key, loc((sub or [key])[0]))
        if spec.type == "names":  # `patch_set: null` (an override of a parent's sets) is none; one name a 1-list
            value = [value] if isinstance(value, str) else list(value or [])
        out[key] = {str(k): str(v) for k, v in (value or {}).items()} if spec.type == "str_map" else value
    for section, keys in SECTIONS.items():
        if not section:
            continue
        raw = {} if data.get(section) is None else data[section]
        if not isinstance(raw, dict):
            raise KimiServeError(
                f"expected a mapping, got {short_repr(raw)}",
                where=loc(section),
                hint=f"write '{section}:' then indented keys",
            )
        for k in raw:
            if k not in keys:
                raise KimiServeError(
                    f"unknown key {short_repr(k)}", where=loc(f"{section}.{k}"), hint=suggest(str(k), list(keys))
                )
        values: dict[str, Any] = {}
        for k, spec in keys.items():
            kp = f"{section}.{k}"
            if k not in raw and spec.required:
                raise KimiServeError("missing required key", where=loc(kp), hint=spec.doc)
            value = raw.get(k, copy.deepcopy(spec.default))
            _check(spec, value, kp, loc(kp))
            values[k] = value
        out[section] = values
    return out


def _check(spec: Key, value: Any, key_path: str, where: str) -> None:
    problem = value_problem(spec, value)
    if problem:
        raise KimiServeError(
            f"expected {problem}, got {short_repr(value)}", where=where, hint=f"set {key_path} to {problem}"
        )


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def load_profile(name_or_path: str, overrides: Sequence[str] = ()) -> Profile:
    """Find, read, merge (``extends``), apply ``--set`` overrides (:mod:`kimi_serve.profile.overrides`) and validate."""
    path = find_profile(name_or_path)
    if line_breaker(path.stem) or path.stem != path.stem.strip():  # the name is in units, records and metrics labels
        raise KimiServeError(
            f"profile name {path.stem!r} has a control character or surrounding whitespace",
            where=display_path(path),
            hint="rename the file to letters, digits and -_. (e.g. prod-a.yaml)",
        )
    merged, chain, where = _load_chain(path)
    return _built(merged, where, path, chain, name_or_path, overrides)


def with_sets(profile: Profile, *sets: str) -> Profile:
    """``profile`` with more ``--set`` overrides applied on top, in memory (the YAML is not read again): the same
    profile ``load_profile(ref, (*profile.overrides, *sets))`` gives."""
    return _built(
        profile.to_dict(), dict(profile.lines), profile.source, profile.chain, profile.ref, sets, profile.overrides
    )


def _built(
    merged: dict[str, Any],
    where: dict[str, str],
    path: Path,
    chain: tuple[Path, ...],
    ref: str,
    overrides: Sequence[str],
    before: tuple[str, ...] = (),
) -> Profile:
    from kimi_serve.profile.overrides import WHERE, parse_sets

    if overrides:
        sets = parse_sets(overrides)
        merged = _merge(merged, sets)
        for key, value in sets.items():
            where.setdefault(key, WHERE)
            for kp in [f"{key}.{k2}" for k2 in value] if isinstance(value, dict) else [key]:
                where[kp] = WHERE
    data = _freeze(_validate(merged, where, path))
    return Profile(
        **{key: data[key] for key in SECTIONS[""]},
        **{section: SECTION_TYPES[section](**data[section]) for section in SECTIONS if section},
        name=path.stem,
        source=path,
        data=data,
        chain=chain,
        lines=where,
        overrides=(*before, *(o.strip() for o in overrides)),
        ref=ref,
    )


def dump_profile(profile: Profile) -> str:
    """The merged profile as standalone YAML (no ``extends``); loading it gives the same profile."""
    header = f"# kimi-serve profile {profile.name!r}, merged from: " + ", ".join(display_path(p) for p in profile.chain)
    if profile.overrides:
        header += "\n# with --set " + " --set ".join(profile.overrides)
    body = yaml.safe_dump(profile.to_dict(), sort_keys=False, default_flow_style=False, allow_unicode=True)
    return f"{header}\n{body}"
