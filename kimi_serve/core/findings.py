"""Results of checks, one type for every layer: a :class:`Finding` is one pass / warn / fail / skip line with a stable
``code``, what holds or what is wrong, and the fix. ``check``, ``doctor``, the service preflight and ``verify`` all
report findings; :func:`error_from` is the one "first failure (+N more)" error raised from them. Its status words are
core/report.py's :class:`~kimi_serve.core.report.Grade`, its JSON that module's ``to_json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.report import Grade

PASS, WARN, FAIL, SKIP = Grade.PASS, Grade.WARN, Grade.FAIL, Grade.SKIP


@dataclass(frozen=True)
class Finding:
    layer: str  # schema, flags, rules, sglang, patches, host, contract, doctor, verify
    code: str  # stable id, e.g. "parsers.tool_call" or verify's "raw_tool_tokens"
    status: str  # pass | warn | fail | skip
    message: str  # one line: what holds or what is wrong
    fix: str = ""  # one line: what to do (warn/fail)
    where: str = ""  # breadcrumb: file:line: key

    def line(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text} (fix: {self.fix})" if self.fix and self.status in (WARN, FAIL) else text


def failed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == FAIL]


def error_from(
    bad: list[Finding], *, more: str, prefix: str = "", where: str | None = None, exit_code: ExitCode = ExitCode.USAGE
) -> KimiServeError:
    """The one-line error for failed findings: the first one, with "+N more" and where to see them (``more``, e.g.
    "run kimi-serve check --profile prod") when there are several. ``where`` is used when the finding has none."""
    first = bad[0]
    extra = f" (+{len(bad) - 1} more: {more})" if len(bad) > 1 else ""
    return KimiServeError(
        f"{prefix}{first.message}{extra}", where=first.where or where, hint=first.fix or None, exit_code=exit_code
    )
