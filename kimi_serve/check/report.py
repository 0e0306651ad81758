"""Validation layers of a profile, fast to slow, and the report `check` prints.

- fast (``render`` runs these): schema (in :func:`load_profile`), the committed SGLang flag table, deployment rules;
- slow (``check`` adds these): SGLang's own parser and resolution under simulated SM120, the patch set against the
  target SGLang, and, unless ``offline``, host facts (model files, API-key file, interpreter);
- ``contract``: the simulator started with the profile's exact flags and the verify suite run against it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from kimi_serve.check.launch import fast_validate
from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import PASS, SKIP, Finding, failed
from kimi_serve.core.report import json_meta
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile, display_path

# Layers whose failures mean the profile itself is invalid (exit 2); other failures are the host's or the server's (1).
INPUT_LAYERS = {"schema", "flags", "rules", "sglang"}  # "contract" failures: exit 1, like verify


@dataclass
class CheckReport:
    """What `check` found (its JSON: ``profile`` by name, ``source``, the findings)."""

    profile: Profile = field(metadata=json_meta(encode=lambda p: p.name))
    launch: Launch = field(metadata=json_meta(omit=True))
    findings: list[Finding] = field(default_factory=list)
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("source",)

    @property
    def source(self) -> str:
        return display_path(self.profile.source)

    @property
    def exit_code(self) -> ExitCode:
        bad = failed(self.findings)
        if not bad:
            return ExitCode.OK
        return ExitCode.USAGE if any(f.layer in INPUT_LAYERS for f in bad) else ExitCode.FAILED


def run_check(
    profile: Profile,
    *,
    offline: bool = False,
    contract: bool = False,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Every layer on a loaded profile (YAML and schema errors raised already, in :func:`load_profile`: exit 2)."""
    say = progress or (lambda _msg: None)
    launch, findings = fast_validate(profile)
    report = CheckReport(
        profile,
        launch,
        [Finding("schema", "profile", PASS, f"{display_path(profile.source)} is a valid profile")] + findings,
    )
    dry_run = None
    if contract:  # start the simulator now: its SGLang import overlaps the parser tier's
        from kimi_serve.check.contract import start_contract

        say("contract dry run: starting the simulator with the profile's exact flags...")
        dry_run = start_contract(profile, offline=offline)
    try:
        report.findings += _slow_layers(profile, launch, offline=offline, say=say)
    except BaseException:
        if dry_run is not None:
            dry_run.cancel()
        raise
    if dry_run is not None:
        # Rule failures do not stop SGLang from starting, so the dry run still shows what clients would get;
        # flags SGLang rejects do.
        if failed(f for f in report.findings if f.layer in {"flags", "sglang"}):
            dry_run.cancel()
            report.findings.append(
                Finding(
                    "contract",
                    "dry-run",
                    SKIP,
                    "contract dry run skipped: SGLang would not start with these flags",
                    "fix the failures above",
                )
            )
        else:
            say("contract dry run: running the verify suite against the simulator...")
            report.findings += dry_run.findings()
    return report


def _slow_layers(profile: Profile, launch: Launch, *, offline: bool, say: Callable[[str], None]) -> list[Finding]:
    say("running SGLang's own parser and resolution (simulated SM120)...")
    from kimi_serve.check.sglang_tier import check_with_sglang

    findings = check_with_sglang(profile, launch)
    from kimi_serve.check.patch_layer import check_patches

    findings += check_patches(profile, offline=offline)
    if not offline:
        from kimi_serve.check.host import check_host

        findings += check_host(profile)
    return findings
