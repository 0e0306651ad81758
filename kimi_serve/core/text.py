"""What a value may hold to stay on its line: in a systemd unit, a timer, a drop-in, a key file or a record line.

A control character (newline, CR, NUL, tab, ESC, ...) or a Unicode line/paragraph separator would end or corrupt the
line it is written on, so every profile and ``--set`` value is refused with one, whatever key it is for.
"""

from __future__ import annotations

import posixpath
import unicodedata

_BREAKING = frozenset(("Cc", "Zl", "Zp"))  # control characters (incl. \n \r \0 \t), line and paragraph separators


def line_breaker(value: str) -> str | None:
    """The first character of ``value`` that does not belong on one line of text, or None."""
    return next((c for c in value if unicodedata.category(c) in _BREAKING), None)


def string_problem(value: str, *, path: bool = False) -> str | None:
    """What a profile string (or, with ``path``, a path) should be instead of ``value``; None when it is fine."""
    bad = line_breaker(value)
    if bad is not None:
        return f"a single-line string without control characters (found {bad!r})"
    if path and not value.startswith("/"):
        return "an absolute path"
    fixed = "/" + posixpath.normpath(value).lstrip("/")  # normpath keeps a leading //
    return f"a normalised absolute path ({fixed})" if path and fixed != value else None
