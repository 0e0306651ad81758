"""The crash log of an internal error (exit 70): the command line with every secret redacted, and the traceback, in a
private file (0600) written through :func:`kimi_serve.core.files.write_atomic` (a temporary file of its own, then one
rename: a link planted at the log's name is replaced, never followed). The environment is never written."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kimi_serve.core.files import write_atomic
from kimi_serve.core.settings import state_root

REDACTED = "<redacted>"
SECRET_WORDS = ("key", "token", "secret", "password", "passwd")  # in an option's name or a --set key path
_SCRUB_MIN = 8  # a redacted value this long is also blanked wherever else it shows (an exception's message)


def _secret_name(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


def _redacted_set(assignment: str, values: list[str]) -> str:
    """A ``--set PATH=VALUE`` assignment, its value redacted when the key path names a secret."""
    path, has_value, value = assignment.partition("=")
    if not (has_value and _secret_name(path)):
        return assignment
    values.append(value)
    return f"{path}={REDACTED}"


def redact_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``args`` with the value of every secret-bearing option replaced (``--api-key V``, ``--api-key=V``, any option
    whose name holds one of :data:`SECRET_WORDS`; ``--set a.key=V`` whose key path does), and the values removed.
    An option's value is the next word unless that is another long option (a flag takes none)."""
    out: list[str] = []
    values: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        takes_next = not eq and i + 1 < len(args) and not args[i + 1].startswith("--")
        if name == "--set":
            if eq:
                out.append(f"{name}={_redacted_set(value, values)}")
            elif i + 1 < len(args):
                out += [arg, _redacted_set(args[i + 1], values)]
                i += 1
            else:
                out.append(arg)
        elif arg.startswith("-") and _secret_name(name) and (eq or takes_next):
            values.append(value if eq else args[i + 1])
            out += [f"{name}={REDACTED}"] if eq else [arg, REDACTED]
            i += 0 if eq else 1
        else:
            out.append(arg)
        i += 1
    return out, [v for v in values if v]


def crash_text(version: str, args: Sequence[str], trace: str) -> str:
    """The log's text: the version and redacted command line, then ``trace`` with any redacted value blanked too."""
    shown, values = redact_args(args)
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= _SCRUB_MIN:
            trace = trace.replace(value, REDACTED)
    return f"kimi-serve {version} {' '.join(shown)}\n{trace}"


def save_crash_log(version: str, args: Sequence[str], trace: str) -> str:
    """Write the crash log (:func:`crash_text`, 0600) in the state root's ``crash/``, else the temp dir; where it
    went, or why not."""
    text = crash_text(version, args, trace)
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (state_root() / "crash", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(folder / name, text, mode=0o600)
            return str(folder / name)
        except OSError:
            continue
    return "not saved (no writable directory)"
