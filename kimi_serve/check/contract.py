"""`check --contract`: the contract dry run as findings (one per probe x mode), so `check` reports it like any layer."""

from __future__ import annotations

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import FAIL, PASS, Finding
from kimi_serve.profile.loader import Profile


def check_contract(profile: Profile, *, offline: bool) -> list[Finding]:
    from kimi_serve.check.dryrun import run_contract_dryrun

    try:
        run = run_contract_dryrun(profile, stand_in_key=offline)
    except KimiServeError as exc:
        return [Finding("contract", "dry-run", FAIL, f"contract dry run could not start: {exc.message}",
                        exc.hint or "", exc.where or "")]
    report = run.report
    head = (f"simulator with the profile's exact flags ready in {run.ready_after_s:.1f}s; {report.suite} suite "
            f"against {report.model}")
    if report.error is not None:
        return [Finding("contract", "dry-run", FAIL, f"{head}: {report.error.message}", report.error.fix)]
    findings = [Finding("contract", "dry-run", PASS, head)]
    for probe in report.probes:
        name = f"{probe.probe}/{probe.mode}"
        if probe.passed:
            findings.append(Finding("contract", name, PASS, f"{name}: contract holds ({probe.latency_s:.2f}s)"))
        else:
            first = probe.findings[0]
            findings.append(Finding("contract", name, FAIL, f"{name}: {first.message}", first.fix))
    return findings
