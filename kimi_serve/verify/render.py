"""Text forms of a :class:`VerifyReport`: a table for a terminal, plain lines for logs and pipes. Each finding code is
said once, with the probes it came from (FAILs first, then warnings), and the last line carries the verdict, the
counts and the cause several failures share (:func:`~kimi_serve.verify.causes.shared_cause`). Every line passes
through :func:`~kimi_serve.verify.wire.printable`: what a server sent is shown escaped, never acted on."""

from __future__ import annotations

from dataclasses import dataclass, field

from kimi_serve.core.findings import FAIL, WARN, Finding
from kimi_serve.core.report import finding_lines
from kimi_serve.verify.causes import shared_cause
from kimi_serve.verify.report import ProbeResult, VerifyReport
from kimi_serve.verify.wire import printable

_REASON_WIDTH = 72


@dataclass
class Group:
    """One finding code (and status) and every probe x mode it came from."""

    status: str
    code: str
    first: Finding
    where: dict[str, list[str]] = field(default_factory=dict)  # probe -> its modes, in report order
    also: dict[str, tuple[str, Finding]] = field(default_factory=dict)  # another fix -> (probe mode, finding)

    def add(self, p: ProbeResult, f: Finding) -> None:
        modes = self.where.setdefault(p.probe, [])
        if p.mode not in modes:
            modes.append(p.mode)
        if f.fix != self.first.fix and f.fix not in self.also:
            self.also[f.fix] = (f"{p.probe} {p.mode}", f)

    def lines(self) -> list[str]:
        probes = ", ".join(f"{name} {'+'.join(modes)}" for name, modes in self.where.items())
        head = f"{self.status.upper()} {self.code} ({probes}): {self.first.line()}"
        return [head, *(f"     {label}: {f.line()}" for label, f in self.also.values())]


def groups(report: VerifyReport) -> list[Group]:
    """The probes' findings by (status, code): failures first, then warnings, each in order of first appearance."""
    out: dict[tuple[str, str], Group] = {}
    for status in (FAIL, WARN):
        for p in report.probes:
            for f in p.findings if status == FAIL else p.warnings:
                out.setdefault((status, f.code), Group(status, f.code, f)).add(p, f)
    return list(out.values())


def _extra_warnings(report: VerifyReport) -> list[Finding]:
    return [*report.warnings, *(c for c in report.checks if c.status == WARN)]


def warning_count(report: VerifyReport) -> int:
    """Warnings as printed: one per code of the probes' warnings, plus the run's own and the checks' warnings."""
    return sum(1 for g in groups(report) if g.status == WARN) + len(_extra_warnings(report))


def _counts(report: VerifyReport) -> str:
    failed = sum(1 for p in report.probes if not p.passed)
    warned = warning_count(report)
    parts = [f"{failed} failed"] if failed else []
    parts += [f"{warned} warning{'s' if warned != 1 else ''}"] if warned else []
    return ", ".join([*parts, f"{len(report.probes) - failed} passed"])


def _summary(report: VerifyReport) -> str:
    if report.error is not None:
        what = "server unreachable or not ready" if report.exit_code == 3 else "contract not checked"
        return f"verify: {what}: {report.error.line()}"
    failed = [p for p in report.probes if not p.passed]
    bad_checks = [c for c in report.checks if c.status == FAIL]
    if not failed and bad_checks:
        return f"verify: contract holds ({_counts(report)}) but least privilege VIOLATED: {bad_checks[0].line()}"
    if not failed:
        return f"verify: contract holds: {_counts(report)} ({report.elapsed_s:.1f}s)"
    cause = shared_cause([p.findings for p in failed], report.server)
    tail = f"; cause: {cause}" if cause else ""
    if report.exit_code == 3:
        unreachable = sum(1 for p in failed if p.unreachable)
        return f"verify: server became unreachable ({unreachable} probes could not connect): {_counts(report)}{tail}"
    return f"verify: contract VIOLATED: {_counts(report)}{tail}"


def _header(report: VerifyReport) -> str:
    return f"verify {report.target}  model {report.model or '?'}  suite {report.suite}  key {report.key_source}"


def _finding_lines(report: VerifyReport) -> list[str]:
    return [line for g in groups(report) for line in g.lines()] + [
        f"WARN {f.code}: {f.line()}" for f in report.warnings
    ]


def _check_lines(report: VerifyReport) -> list[str]:
    lines = finding_lines(report.checks, word="upper", label="code")
    for lst in report.listeners or []:
        lines.append(f"     listener {lst.endpoint} pid {lst.pid} ({lst.command})")
    return lines


def _codes(p: ProbeResult) -> str:
    return ", ".join(dict.fromkeys(f.code for f in p.findings))


def render_lines(report: VerifyReport) -> str:
    """One line per probe and mode (a failure names its codes), then each finding code once with the probes it came
    from and its fix, the least-privilege checks, and the summary; for logs and pipes."""
    lines = [_header(report)]
    for p in report.probes:
        head = f"{'PASS' if p.passed else 'FAIL'} {p.probe} {p.mode} {p.latency_s:.2f}s"
        tail = p.detail if p.passed else _codes(p)
        lines.append(f"{head}: {tail}" if tail else head)
    lines.extend(_finding_lines(report))
    lines.extend(_check_lines(report))
    lines.append(_summary(report))
    return "\n".join(map(printable, lines))  # server text (a model id, a listener) cannot forge a line


def render_table(report: VerifyReport) -> str:
    """A compact probe x mode table (a failure's codes as its reason), each finding code once with its probes and
    fix, then the summary."""
    lines = [_header(report)]
    if report.probes:
        rows = [("PROBE", "MODE", "RESULT", "LATENCY", "REASON")]
        for p in report.probes:
            reason = "ok" if p.passed else _codes(p)
            reason = reason if len(reason) <= _REASON_WIDTH else reason[: _REASON_WIDTH - 3] + "..."
            rows.append((p.probe, p.mode, "pass" if p.passed else "FAIL", f"{p.latency_s:.2f}s", reason))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:  # the latency right-aligned, the reason as it is
            cells = [c.rjust(w) if i == 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r[:4], widths, strict=True))]
            lines.append("  ".join([*cells, r[4]]).rstrip())
        lines.extend(f"{p.probe}/{p.mode}: {p.detail}" for p in report.probes if p.detail)
    found = _finding_lines(report)
    if found:
        lines += ["", *found]
    if report.checks:
        lines += ["", *_check_lines(report)]
    lines.append(_summary(report))
    return "\n".join(map(printable, lines))  # server text (a model id, a listener) cannot forge a line
