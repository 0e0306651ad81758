"""How a value is written into a systemd unit file so that systemd reads it back unchanged (systemd.service(5)).

systemd reads an ``ExecStart=`` line in three passes, and each needs its own escape:
1. unit specifiers over the whole line: ``%`` -> ``%%``;
2. splitting into words, C-unescaping inside double quotes: every argument is quoted, ``\\`` and ``"`` escaped;
3. at exec time, ``$VAR``/``${VAR}`` expansion of each argument: ``$`` -> ``$$`` (not in the executable's path, which
   systemd takes verbatim and where it refuses quotes and backslashes: those are rejected).
``Environment=`` gets passes 1 and 2 only (systemd does not expand variables there). What systemd cannot carry (NUL,
control characters, text that is not UTF-8) is rejected with the profile key that holds it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.text import line_breaker

_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


def carryable(value: str, where: str) -> str:
    """``value`` if systemd can carry it in a unit file; else a one-line error naming ``where``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise KimiServeError(f"value {value!r} is not valid UTF-8", where=where, hint="use plain text") from None
    bad = line_breaker(value)
    if bad is not None:
        raise KimiServeError(
            f"value {value!r} contains control character {bad!r}, which a systemd unit cannot carry",
            where=where,
            hint="remove it",
        )
    return value


def quote(text: str) -> str:
    """Passes 1 and 2: a double-quoted word that systemd turns back into ``text``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def exec_line(argv: Sequence[str], where: str) -> str:
    """An ``Exec*=`` value whose words systemd hands to execve() exactly as ``argv``."""
    if not argv or not argv[0].startswith("/"):
        raise KimiServeError(
            f"the command {argv[0] if argv else ''!r} is not an absolute path",
            where=where,
            hint="set python: to an absolute interpreter path (systemd's PATH is not the shell's)",
        )
    bad = next((c for c in argv[0] if c in "\"'\\$"), None)
    if bad is not None:  # systemd refuses quotes and backslashes there, and takes $ in the path verbatim ($$ too)
        raise KimiServeError(
            f"the command {argv[0]!r} contains {bad!r}, which systemd cannot carry in an executable path",
            where=where,
            hint="install it under a path without quotes, backslashes or $",
        )
    return " ".join(
        [quote(carryable(argv[0], where)), *(quote(carryable(a, where).replace("$", "$$")) for a in argv[1:])]
    )


def environment_line(name: str, value: str, where: str) -> str:
    """An ``Environment=`` value setting ``name`` to ``value`` exactly."""
    return quote(f"{name}={carryable(value, where)}")


def specifiers(value: str, where: str) -> str:
    """For settings systemd takes verbatim (no quotes, no C escapes): only specifiers need escaping."""
    if value != value.strip():
        raise KimiServeError(
            f"value {value!r} has leading or trailing whitespace, which systemd drops",
            where=where,
            hint="remove the whitespace",
        )
    if value.endswith("\\"):
        raise KimiServeError(
            f"value {value!r} ends with a backslash, which systemd reads as a line continuation",
            where=where,
            hint="remove the trailing backslash",
        )
    return carryable(value, where).replace("%", "%%")


def user_name(value: str, where: str) -> str:
    if not _USER.fullmatch(value):
        raise KimiServeError(f"invalid user name {value!r}", where=where, hint="use a system user such as root")
    return value


def resource_limit(value: str, where: str) -> str:
    if value == "infinity" or re.fullmatch(r"\d+[KMGTPE]?", value):
        return value
    raise KimiServeError(f"invalid resource limit {value!r}", where=where, hint="use 'infinity' or a size like 64G")
