"""Text forms of a :class:`VerifyReport`: a table for a terminal, plain lines for logs and pipes. Every line passes
through :func:`~kimi_serve.verify.wire.printable`: what a server sent is shown escaped, never acted on."""

from __future__ import annotations

from kimi_serve.verify.report import VerifyReport
from kimi_serve.verify.wire import printable

_REASON_WIDTH = 72


def _summary(report: VerifyReport) -> str:
    if report.error is not None:
        what = "server unreachable or not ready" if report.exit_code == 3 else "contract not checked"
        return f"verify: {what}: {report.error.line()}"
    failed = [p for p in report.probes if not p.passed]
    total = len(report.probes)
    bad_checks = [c for c in report.checks if c.status == "fail"]
    if not failed and bad_checks:
        return f"verify: contract holds ({total}/{total} probes) but least privilege VIOLATED: {bad_checks[0].line()}"
    if not failed:
        return f"verify: contract holds ({total}/{total} probes passed in {report.elapsed_s:.1f}s)"
    if report.exit_code == 3:
        return f"verify: server became unreachable ({len(failed)} of {total} probes could not connect)"
    return f"verify: contract VIOLATED ({len(failed)} of {total} probes failed)"


def _header(report: VerifyReport) -> str:
    return f"verify {report.target}  model {report.model or '?'}  suite {report.suite}  key {report.key_source}"


def _warnings(report: VerifyReport) -> list[str]:
    probe = [f"WARN {p.probe} {p.mode}: {f.code}: {f.line()}" for p in report.probes for f in p.warnings]
    return probe + [f"WARN {f.code}: {f.line()}" for f in report.warnings]


def _check_lines(report: VerifyReport) -> list[str]:
    lines = [f"{c.status.upper()} {c.code}: {c.line()}" for c in report.checks]
    for lst in report.listeners or []:
        lines.append(f"     listener {lst.endpoint} pid {lst.pid} ({lst.command})")
    return lines


def render_lines(report: VerifyReport) -> str:
    """One line per probe and mode (plus one per extra finding), then the summary; for logs and pipes."""
    lines = [_header(report)]
    for p in report.probes:
        head = f"{'PASS' if p.passed else 'FAIL'} {p.probe} {p.mode} {p.latency_s:.2f}s"
        lines.append((f"{head}: {p.detail}" if p.detail else head) if p.passed else f"{head}: {p.findings[0].line()}")
        lines.extend(f"     {p.probe} {p.mode}: {f.line()}" for f in p.findings[1:])
    lines.extend(_warnings(report))
    lines.extend(_check_lines(report))
    lines.append(_summary(report))
    return "\n".join(map(printable, lines))  # server text (a model id, a listener) cannot forge a line


def render_table(report: VerifyReport) -> str:
    """A compact probe x mode table, the fixes for what failed, then the summary."""
    lines = [_header(report)]
    if report.probes:
        rows = [("PROBE", "MODE", "RESULT", "LATENCY", "REASON")]
        for p in report.probes:
            reason = p.reason if len(p.reason) <= _REASON_WIDTH else p.reason[: _REASON_WIDTH - 3] + "..."
            rows.append((p.probe, p.mode, "pass" if p.passed else "FAIL", f"{p.latency_s:.2f}s", reason))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            lines.append(
                "  ".join(
                    [r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].ljust(widths[2]), r[3].rjust(widths[3]), r[4]]
                ).rstrip()
            )
        lines.extend(f"{p.probe}/{p.mode}: {p.detail}" for p in report.probes if p.detail)
        failed = [p for p in report.probes if not p.passed]
        if failed:
            lines.append("")
            for p in failed:
                lines.extend(f"{p.probe}/{p.mode}: {f.line()}" for f in p.findings)
    lines.extend(_warnings(report))
    if report.checks:
        lines += ["", *_check_lines(report)]
    lines.append(_summary(report))
    return "\n".join(map(printable, lines))  # server text (a model id, a listener) cannot forge a line
