"""kimi-serve's marker in a unit it wrote: the first line names kimi-serve's version, the profile, its patch set, the
endpoint, the member's role and the SHA-256 of everything below the marker, so ``status`` can tell which profile is
live and whether the file was edited; a second line records the ``--set`` overrides it was rendered with."""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.service.state import read_text

MARKER_PREFIX = "# kimi-serve unit:"
OVERRIDES_PREFIX = "# kimi-serve --set: "  # second line, only when the unit was rendered with --set
_MARKER_FIELD = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class Marker:
    version: str
    profile: str
    patch_set: str
    endpoint: str
    sha256: str
    body_matches: bool  # False when the file was edited after kimi-serve wrote it
    overrides: tuple[str, ...] = ()  # the --set KEY=VALUE items the unit was rendered with
    role: str = ""  # a deployment member's role (replica:I, router, rank:R); "" for a single unit


def marker_value(value: str) -> str:
    return re.sub(r"\s", "_", value)


def parse_marker(text: str) -> Marker | None:
    """The marker of a unit kimi-serve wrote, or None for a unit it did not write."""
    first, _, body = text.partition("\n")
    if not first.startswith(MARKER_PREFIX):
        return None
    fields = dict(_MARKER_FIELD.findall(first[len(MARKER_PREFIX) :]))
    digest = fields.get("sha256", "")
    second = body.partition("\n")[0]
    overrides = tuple(shlex.split(second[len(OVERRIDES_PREFIX) :])) if second.startswith(OVERRIDES_PREFIX) else ()
    return Marker(
        version=fields.get("version", "?"),
        profile=fields.get("profile", "?"),
        patch_set=fields.get("patch_set", "none"),
        endpoint=fields.get("endpoint", ""),
        sha256=digest,
        body_matches=body_hash(body) == digest,
        overrides=overrides,
        role=fields.get("role", ""),
    )


def body_hash(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def refuse_foreign(path: Path) -> None:
    """Exit 5 when ``path`` holds a unit kimi-serve did not write (no marker line)."""
    text = read_text(path)
    if text is not None and parse_marker(text) is None:
        raise KimiServeError(
            f"{path} was not written by kimi-serve (no marker line); refusing to touch it",
            hint=f"move it aside first (mv {path} /root/), or use another --unit-name",
            exit_code=ExitCode.ENVIRONMENT,
        )
