"""The full `check` as install-service and restart need it, with the two host facts the service layer owns itself;
`doctor`'s one body (:func:`doctor`: the host's checks and what the unit adds).

The API-key file is checked (or created) under the install root by :mod:`kimi_serve.service.install`, not here.
With ``contract``, the check's contract dry run (the profile's flags through the simulator) runs too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, PASS, WARN, Finding, error_from, failed
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.service.systemctl import Systemd

if TYPE_CHECKING:
    from kimi_serve.host.doctor import DoctorReport, Host

T = TypeVar("T")
_SERVICE_OWNED = ("host", "server.api_key_file")  # install checks or creates the key file under its root itself


def check_for_service(profile: Profile, *, contract: bool, preview: bool = False) -> tuple[Launch, list[Finding]]:
    """Run the full check (host facts included); raise the first failure as a one-line error. With ``preview``
    (install-service --dry-run), only an invalid profile raises: host failures come back as findings."""
    from kimi_serve.check.report import INPUT_LAYERS, run_check

    report = run_check(profile, offline=False, contract=contract)
    findings = [f for f in report.findings if (f.layer, f.code) != _SERVICE_OWNED]
    bad = failed(findings)
    if preview:
        bad = [f for f in bad if f.layer in INPUT_LAYERS]
    if bad:
        usage = any(f.layer in INPUT_LAYERS for f in bad)
        raise error_from(
            bad,
            more=f"kimi-serve check {report.profile.cli_args()}",
            prefix="check failed: ",
            exit_code=ExitCode.USAGE if usage else ExitCode.FAILED,
        )
    return report.launch, findings


def require_systemd(systemd: Systemd) -> None:
    """install-service, restart and uninstall drive the running systemd: without one (a container, a chroot, WSL)
    they refuse before anything is written (exit 5) instead of failing at the first systemctl call half-way."""
    reason = systemd.unreachable()
    if reason:
        raise KimiServeError(
            f"systemd is not running here, nothing was changed (systemctl: {reason})",
            where="systemd",
            hint="run on a host booted with systemd (PID 1), or install offline with --root DIR",
            exit_code=ExitCode.ENVIRONMENT,
        )


def host_step(preview: bool, found: list[Finding], call: Callable[[], T], default: T) -> T:
    """Run one host check of the install plan: its error raises, or, in a preview, becomes a failed finding (an invalid
    profile, exit 2, always raises)."""
    try:
        return call()
    except KimiServeError as exc:
        if not preview or exc.exit_code == ExitCode.USAGE:
            raise
        found.append(Finding("host", "service", FAIL, exc.message, exc.hint or "", exc.where or ""))
        return default


def refuse_other_profile(unit_file: str, installed: str | None, profile: str) -> None:
    """A unit name another profile's unit already has: installing would silently replace that deployment."""
    if installed is not None and installed != profile:
        raise KimiServeError(
            f"{unit_file} is the unit of profile {installed!r}; installing {profile!r} would replace it",
            where="service.unit_name",
            hint="pass --replace to replace it, or give this profile its own service.unit_name (or --unit-name)",
            exit_code=ExitCode.ENVIRONMENT,
        )


def doctor_reach(profile: Profile, launch: Launch, environ: Mapping[str, str]) -> list[Finding]:
    """doctor's ``unit.reach``: the same judgement install-service makes before writing (the unit's user, inside its
    sandbox, can run its interpreter and start gate and read its model), on the system the unit would run on
    ($KIMI_SERVE_ACCOUNTS_ROOT, default /). A pass when it can; the failures otherwise, each with its fix."""
    from kimi_serve.core.settings import from_env
    from kimi_serve.service.unit import UnitContext, unit_reach

    # a simulator profile is a foreground try (up runs as the invoking user): what would stop its unit is install-
    # service's concern, a warning here; a GPU profile's unit is how it serves, so its reach fails doctor
    try_out = profile.engine == "simulator"
    try:
        ctx = UnitContext.detect().for_engine(launch.argv[0])
    except KimiServeError as exc:
        return [
            Finding("doctor", "unit.reach", WARN if try_out else FAIL, exc.message, exc.hint or "", exc.where or "")
        ]
    drift = [replace(f, layer="doctor") for f in (ctx.engine_drift(),) if f is not None]
    # unit_reach's findings are failures: a warning for a try-out
    note = "install-service only (up runs as you): " if try_out else ""
    found = [
        replace(f, layer="doctor", status=WARN if try_out else f.status, message=note + f.message)
        for f in unit_reach(profile, launch, ctx, from_env(environ).accounts_root)
    ]
    if found:
        return found + drift
    user = profile.service.user
    return [
        Finding(
            "doctor",
            "unit.reach",
            PASS,
            f"{user} can run {launch.argv[0]} and {ctx.kimi_serve} inside the unit's sandbox and read the model",
        ),
        *drift,
    ]


def doctor(profile: Profile, host: Host, environ: Mapping[str, str], *, as_root: bool) -> DoctorReport:
    """`doctor`'s one body: the host's checks for the profile (:func:`kimi_serve.host.doctor.run_doctor`), then what
    its unit adds: whether the unit can start (:func:`doctor_reach`, install-service's own judgement) and, for a GPU
    profile, the unit's toolchain and CUDA inside its sandbox (``as_root``: :mod:`kimi_serve.service.unit_gpu`)."""
    from kimi_serve.check.launch import validated_launch
    from kimi_serve.host.doctor import run_doctor
    from kimi_serve.service.unit_gpu import doctor_unit_gpu

    launch = validated_launch(profile)
    report = run_doctor(profile, launch, host)
    report.checks += doctor_reach(profile, launch, environ)
    report.checks += doctor_unit_gpu(profile, launch, host, report.checks, as_root=as_root)
    return report
