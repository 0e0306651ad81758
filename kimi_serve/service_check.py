"""The full `check` as install-service and restart need it, with the two host facts the service layer owns itself.

The API-key file is checked (or created) under the install root by :mod:`kimi_serve.service`, not here.
With ``contract``, the check's contract dry run (the profile's flags through the simulator) runs too.
"""

from __future__ import annotations

from kimi_serve.errors import ExitCode, KimiServeError
from kimi_serve.findings import Finding, failed
from kimi_serve.launch import Launch
from kimi_serve.profile import Profile

_SERVICE_OWNED = {("host", "server.api_key_file")}


def adapt_findings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if (f.layer, f.name) not in _SERVICE_OWNED]


def check_for_service(profile_name: str, *, contract: bool) -> tuple[Profile, Launch, list[Finding]]:
    """Run the full check (host facts included); raise the first failure as a one-line error."""
    from kimi_serve.checks import INPUT_LAYERS, run_check

    report = run_check(profile_name, offline=False, contract=contract)
    findings = adapt_findings(report.findings)
    bad = failed(findings)
    if bad:
        usage = any(f.layer in INPUT_LAYERS for f in bad)
        more = f" (+{len(bad) - 1} more: kimi-serve check --profile {profile_name})" if len(bad) > 1 else ""
        raise KimiServeError(f"check failed: {bad[0].message}{more}", where=bad[0].where or None,
                             hint=bad[0].fix or None, exit_code=ExitCode.USAGE if usage else ExitCode.FAILED)
    return report.profile, report.launch, findings
