"""The full `check` as install-service and restart need it, with the two host facts the service layer owns itself.

The API-key file is checked (or created) under the install root by :mod:`kimi_serve.service.install`, not here.
With ``contract``, the check's contract dry run (the profile's flags through the simulator) runs too.
"""

from __future__ import annotations

from collections.abc import Sequence

from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import Finding, error_from, failed
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile

_SERVICE_OWNED = {("host", "server.api_key_file")}


def adapt_findings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if (f.layer, f.code) not in _SERVICE_OWNED]


def check_for_service(profile_name: str, *, contract: bool, sets: Sequence[str] = ()
                      ) -> tuple[Profile, Launch, list[Finding]]:
    """Run the full check (host facts included); raise the first failure as a one-line error."""
    from kimi_serve.check.report import INPUT_LAYERS, run_check

    report = run_check(profile_name, offline=False, contract=contract, sets=sets)
    findings = adapt_findings(report.findings)
    bad = failed(findings)
    if bad:
        usage = any(f.layer in INPUT_LAYERS for f in bad)
        raise error_from(bad, more=f"kimi-serve check {report.profile.cli_args()}", prefix="check failed: ",
                         exit_code=ExitCode.USAGE if usage else ExitCode.FAILED)
    return report.profile, report.launch, findings
