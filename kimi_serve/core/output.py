"""The one JSON envelope every ``--json`` writes on stdout, on success and on failure (docs/json.md):

``{"kind": "kimi-serve-COMMAND", "version": 1, "ok": bool, "exit_code": int, "findings": [{code, message, fix, ...}],
...the command's own keys}``. :func:`error_document` is what the CLI boundary prints for an error, a usage error or an
internal error when ``--json`` was given, so a script always gets one document to parse.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.report import to_json

VERSION = 1
ENVELOPE_KEYS = ("kind", "version", "ok", "exit_code", "findings")


def kind_of(command: str) -> str:
    return f"kimi-serve-{command}"


def finding_dict(f: Finding | Mapping[str, Any]) -> dict[str, Any]:
    """A finding as the envelope lists it: at least ``code``, ``message``, ``fix`` (plus layer/status/where)."""
    if isinstance(f, Finding):
        return dict(to_json(f))
    d = dict(f)
    return {
        "code": str(d.pop("code", "")),
        "message": str(d.pop("message", "")),
        "fix": str(d.pop("fix", "") or ""),
        **d,
    }


def envelope(
    command: str,
    exit_code: int,
    data: Mapping[str, Any] | None = None,
    findings: Iterable[Finding | Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The envelope around a command's own keys (``data``); ``findings`` default to ``data["findings"]``."""
    body = dict(data or {})
    listed = body.pop("findings", None) if findings is None else findings
    for key in ENVELOPE_KEYS:
        body.pop(key, None)
    return {
        "kind": kind_of(command),
        "version": VERSION,
        "ok": int(exit_code) == 0,
        "exit_code": int(exit_code),
        "findings": [finding_dict(f) for f in (listed or [])],
        **body,
    }


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2)


def error_document(
    command: str, exc: BaseException, *, code: str = "error", exit_code: int | None = None
) -> dict[str, Any]:
    """The envelope for a command that failed before it had a report: one finding from the error."""
    if isinstance(exc, KimiServeError):
        finding = Finding("cli", code, FAIL, exc.message, exc.hint or "", exc.where or "")
    else:
        message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        finding = Finding("cli", code, FAIL, message, "a bug in kimi-serve: rerun with --debug and report it")
    rc = (exc.exit_code if isinstance(exc, KimiServeError) else ExitCode.INTERNAL) if exit_code is None else exit_code
    return envelope(command, int(rc), findings=[finding])


def command_of(args: Sequence[str], groups: Iterable[str] = ()) -> str:
    """The command an argv names (``patches apply`` -> ``patches-apply``), for ``kind``; "cli" when none."""
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return "cli"
    if words[0] in set(groups) and len(words) > 1:
        return f"{words[0]}-{words[1]}"
    return words[0]


# --- colour on a terminal -------------------------------------------------------------------------------------------

_SGR = {"pass": "32", "ok": "32", "warn": "33", "fail": "1;31", "skip": "2"}  # green, yellow, bold red, dim
# A status word as the findings renderers print it: a line's first word (`FAIL probe ...`, `ok   [rules] ...`,
# `WARN  code ...`), or a table cell (`  pass  `, two spaces or more on each side or the line's end after it).
_STATUS_WORD = re.compile(r"(?m)(?:^|(?<=  ))(PASS|WARN|FAIL|SKIP|pass|warn|fail|skip|ok)(?=\s|$)")


def colour(stream: TextIO) -> bool:
    """The one decision: colour only on a terminal, and never when $NO_COLOR holds anything (no-color.org)."""
    from kimi_serve.core.settings import current

    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or wrapped stream
        return False
    return tty and not current().no_color


def sgr(text: str, code: str, on: bool) -> str:
    """``text`` wrapped in the ANSI SGR ``code`` (e.g. "2" dim) when ``on``; else as it is."""
    return f"\x1b[{code}m{text}\x1b[0m" if on and text else text


def paint_statuses(text: str, on: bool) -> str:
    """The pass / warn / fail / skip words of a rendered findings report coloured when ``on`` (see :func:`colour`);
    the text unchanged otherwise, so pipes, logs and tests read plain text."""
    return _STATUS_WORD.sub(lambda m: sgr(m.group(1), _SGR[m.group(1).lower()], True), text) if on else text
