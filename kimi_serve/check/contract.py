"""`check --contract`: the contract dry run as findings (one per probe x mode), so `check` reports it like any layer.

:func:`start_contract` starts the simulator at once and returns; `check` runs SGLang's parser tier meanwhile (the two
SGLang imports overlap) and then collects the findings (:meth:`ContractCheck.findings`) or cancels the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import FAIL, PASS, WARN, Finding
from kimi_serve.profile.loader import Profile


@dataclass
class ContractCheck:
    """A dry run in flight: either a started simulator or the error that kept it from starting."""

    pending: Any = None
    error: Finding | None = None

    def cancel(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None

    def findings(self) -> list[Finding]:
        if self.pending is None:  # it never started (``error``), or was finished or cancelled
            return [self.error] if self.error else []
        try:
            return _report_findings(self.pending.finish())
        except KimiServeError as exc:
            return [_could_not_start(exc)]
        finally:
            self.pending = None


def _could_not_start(exc: KimiServeError) -> Finding:
    return Finding(
        "contract", "dry-run", FAIL, f"contract dry run could not start: {exc.message}", exc.hint or "", exc.where or ""
    )


def start_contract(profile: Profile, *, offline: bool) -> ContractCheck:
    from kimi_serve.check.dryrun import start_contract_dryrun

    try:
        return ContractCheck(start_contract_dryrun(profile, stand_in_key=offline))
    except KimiServeError as exc:
        return ContractCheck(error=_could_not_start(exc))


def _report_findings(run: Any) -> list[Finding]:
    report = run.report
    head = (
        f"simulator with the profile's exact flags ready in {run.ready_after_s:.1f}s; {report.suite} suite "
        f"against {report.model}"
    )
    if report.error is not None:
        return [Finding("contract", "dry-run", FAIL, f"{head}: {report.error.message}", report.error.fix)]
    findings = [Finding("contract", "dry-run", PASS, head)]
    if run.draft:  # the class SGLang resolved for the draft (prod's: Eagle3DeepseekV2ForCausalLM)
        findings.append(Finding("contract", "draft", PASS, f"draft: {run.draft}"))
    for probe in report.probes:
        name = f"{probe.probe}/{probe.mode}"
        if probe.passed:
            findings.append(Finding("contract", name, PASS, f"{name}: contract holds ({probe.latency_s:.2f}s)"))
        else:
            first = probe.findings[0]
            findings.append(Finding("contract", name, FAIL, f"{name}: {first.message}", first.fix))
        findings += [
            Finding("contract", f"{name}:{w.code}", WARN, f"{name}: {w.message}", w.fix) for w in probe.warnings
        ]
    findings += [
        Finding("contract", w.code, WARN, f"the SGLang this dry run used: {w.message}", w.fix) for w in report.warnings
    ]
    # a key leak is verify's FAIL against a server; here it describes the engine the dry run ran on (the CPU one),
    # not the profile's server (the patches layer checks that), so it is said as a warning
    findings += [
        Finding("contract", c.code, WARN, f"the SGLang this dry run used: {c.message}", c.fix)
        for c in report.checks
        if c.code == "server_info_leaks_key"
    ]
    return findings
