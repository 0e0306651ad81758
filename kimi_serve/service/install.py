"""install-service and uninstall-service: plans built as data, then applied step by step.

A :class:`Plan` is everything install would do (the unit text, the secret file it would create, each action), so
``--dry-run`` prints it and touches nothing. Applying it records each :class:`Step` in a :class:`Result`. Host paths
come from a root (:class:`ServicePaths`), processes from a ``Runner`` (:class:`Systemd`), and the contract check from
a ``Verifier``. The smoke-tested restart with rollback is :mod:`kimi_serve.service.restart`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.keyfile import SUFFIXES, new_admin_key, render_key_file
from kimi_serve.core.proc import Completed
from kimi_serve.core.settings import API_KEY_ENV, from_env
from kimi_serve.profile.loader import Profile
from kimi_serve.service import account
from kimi_serve.service.preflight import check_for_service
from kimi_serve.service.state import ServicePaths, read_text, write_atomic, write_record
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.timeouts import restart_wait_sec
from kimi_serve.service.unit import RenderedUnit, UnitContext, parse_marker, render_unit, unit_file_name

VERIFY_WAIT_AFTER_START = 30.0  # the unit is active (its ExecStartPost passed), so readiness should be immediate

# (endpoint HOST:PORT, API-key file or None, suite, timeout) -> (verify exit code, one-line summary)
Verifier = Callable[[str, Path | None, str, float], tuple[int, str]]


@dataclass
class Step:
    action: str
    status: str  # planned | done | failed | skipped
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"action": self.action, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class Candidate:
    """A unit to bring up and how to verify it: a freshly rendered one, or the last good one from the record."""

    name: str
    text: str
    sha256: str
    profile: str
    patch_set: str | None
    api_key_file: str | None
    suite: str
    verify_timeout: float
    restart_timeout: float

    def record(self) -> dict[str, Any]:
        return {"profile": self.profile, "patch_set": self.patch_set, "unit_sha256": self.sha256,
                "api_key_file": self.api_key_file, "suite": self.suite, "verify_timeout": self.verify_timeout,
                "restart_timeout": self.restart_timeout}

    @classmethod
    def from_record(cls, name: str, text: str, record: Mapping[str, Any]) -> Candidate:
        return cls(name, text, str(record["unit_sha256"]), str(record["profile"]), record.get("patch_set"),
                   record.get("api_key_file"), str(record["suite"]), float(record["verify_timeout"]),
                   float(record["restart_timeout"]))


@dataclass(frozen=True)
class Plan:
    profile: Profile
    unit: RenderedUnit
    paths: ServicePaths
    create_secret: bool
    findings: tuple[Finding, ...]
    now: bool

    @property
    def candidate(self) -> Candidate:
        p = self.profile
        return Candidate(self.unit.name, self.unit.text, self.unit.sha256, p.name, p.patch_set,
                         p.server.api_key_file, p.verify.suite, float(p.verify.timeout), restart_wait_sec(p))


@dataclass
class Outcome:
    """What happened to one unit (the new one, or the last good one put back)."""

    profile: str
    unit_sha256: str
    started: bool = False
    verify_exit: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.started and self.verify_exit == 0

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "unit_sha256": self.unit_sha256, "started": self.started,
                "verify_exit_code": self.verify_exit, "ok": self.ok, "detail": self.detail}


@dataclass
class Result:
    unit: str
    steps: list[Step] = field(default_factory=list)
    new: Outcome | None = None
    rollback: Outcome | None = None
    exit_code: ExitCode = ExitCode.OK

    def add(self, action: str, status: str, detail: str = "") -> None:
        self.steps.append(Step(action, status, detail))

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "unit": self.unit, "ok": self.exit_code == ExitCode.OK, "exit_code": int(self.exit_code),
                "steps": [s.to_json() for s in self.steps],
                "new": self.new.to_json() if self.new else None,
                "rollback": self.rollback.to_json() if self.rollback else None}


# ---------------------------------------------------------------------------------------------- planning


def plan_install(profile_name: str, *, root: Path, unit_name: str | None, now: bool, ctx: UnitContext,
                 systemd: Systemd, environ: Mapping[str, str], contract: bool = False) -> Plan:
    """Check the profile, render its unit and have systemd-analyze verify it. Changes nothing under ``root``."""
    if now and not systemd.live:
        raise KimiServeError("--now needs the running system, not --root", where="--now",
                             hint="drop --now, or drop --root")
    profile, launch, findings = check_for_service(profile_name, contract=contract)
    name = unit_file_name(unit_name, "--unit-name") if unit_name else None
    unit = render_unit(profile, launch, ctx, unit_name=name)
    paths = ServicePaths(root, unit.name)
    refuse_foreign(paths)
    analyze(systemd, unit)
    return Plan(profile, unit, paths, _needs_secret(profile, paths, environ), tuple(findings), now)


def refuse_foreign(paths: ServicePaths) -> None:
    text = read_text(paths.unit_file)
    if text is not None and parse_marker(text) is None:
        raise KimiServeError(f"{paths.unit_file} was not written by kimi-serve (no marker line); refusing to touch it",
                             hint=f"move it aside first (mv {paths.unit_file} /root/), or use another --unit-name",
                             exit_code=ExitCode.ENVIRONMENT)


def analyze(systemd: Systemd, unit: RenderedUnit) -> None:
    """``systemd-analyze verify`` on the rendered text; any stderr is a failure (it exits 0 on many mistakes)."""
    with tempfile.TemporaryDirectory(prefix="kimi-serve-unit-") as tmp:
        path = Path(tmp) / unit.name
        path.write_text(unit.text, encoding="utf-8")
        done = systemd.analyze_verify(path)
    complaints = [line.replace(str(path), unit.name) for line in done.err.strip().splitlines()]
    if done.rc != 0 or complaints:
        first = complaints[0] if complaints else f"exit status {done.rc}"
        raise KimiServeError(f"systemd-analyze verify rejects the rendered unit: {first}", where=unit.name,
                             hint="fix the profile value it names", exit_code=ExitCode.FAILED)


def _needs_secret(profile: Profile, paths: ServicePaths, environ: Mapping[str, str]) -> bool:
    """Whether install must create the API-key file; raises when it is missing and cannot be created."""
    secret = profile.server.api_key_file
    if secret is None:
        return False
    where = profile.where("server.api_key_file")
    if paths.under_root(secret).exists():
        from kimi_serve.check.host import check_api_key_file

        finding = check_api_key_file(str(paths.under_root(secret)), profile)
        if finding.status == FAIL:
            raise KimiServeError(finding.message, where=finding.where, hint=finding.fix, exit_code=ExitCode.FAILED)
        return False
    if not environ.get(API_KEY_ENV, "").strip():
        raise KimiServeError(f"API-key file {secret} does not exist", where=where,
                             hint=f"set ${API_KEY_ENV} and install-service creates it (0600), or create it: "
                                  f"install -m 600 /dev/null {secret}, then write 'api-key: KEY' into it",
                             exit_code=ExitCode.FAILED)
    if not secret.endswith(SUFFIXES):
        raise KimiServeError(f"{secret}: SGLang's --config accepts only .yaml/.yml files", where=where,
                             hint="name it e.g. /etc/kimi-serve/secrets.yaml")
    return True


def planned_actions(plan: Plan, systemd: Systemd) -> list[str]:
    """What applying ``plan`` does, in order (``--dry-run`` prints these)."""
    p = plan.paths
    actions: list[str] = []
    if plan.create_secret:
        admin = " and a new random admin-api-key" if plan.profile.server.admin_key != "none" else ""
        actions.append(f"create {plan.profile.server.api_key_file} (mode 0600) with the key from ${API_KEY_ENV}{admin}")
    actions += account.planned(plan.profile.service.user, *account.roots(p.root, systemd.live, Path("/")))
    actions.append(f"create working directory {plan.profile.service.working_directory} if missing")
    if p.unit_file.exists():
        actions.append(f"keep the current unit as {p.previous_unit}")
    actions.append(f"write {p.unit_file} atomically (sha256 {plan.unit.sha256[:12]})")
    if systemd.live:
        actions.append("systemctl daemon-reload")
    actions.append(f"systemctl {'' if systemd.live else f'--root={p.root} '}enable {p.unit}")
    if plan.now:
        actions.append(f"systemctl restart {p.unit} (returns once ExecStartPost kimi-serve verify passed)")
        actions.append("kimi-serve verify; on a pass record this unit as the last good one")
    return actions


# ---------------------------------------------------------------------------------------------- applying


def must(result: Result, action: str, done: Completed) -> None:
    if done.ok:
        result.add(action, "done")
        return
    result.add(action, "failed", done.describe())
    raise KimiServeError(done.describe(), where=action, hint="fix the host problem it names and run it again",
                         exit_code=ExitCode.ENVIRONMENT)


def write_unit(plan: Plan, systemd: Systemd, result: Result, environ: Mapping[str, str]) -> None:
    """Secret (if planned), working dir, unit file (keeping the previous one), daemon-reload, enable."""
    p, profile = plan.paths, plan.profile
    user, roots = profile.service.user, account.roots(p.root, systemd.live, from_env(environ).accounts_root)
    owner, done = account.ensure(user, profile.service.working_directory, accounts_root=roots[0], dev_root=roots[1],
                                 runner=systemd.runner)
    for action in done:
        result.add(action, "done")
    if plan.create_secret and profile.server.api_key_file:
        _create_secret(p.under_root(profile.server.api_key_file), profile, environ.get(API_KEY_ENV, ""))
        result.add(f"create {profile.server.api_key_file} (0600)", "done")
    p.under_root(profile.service.working_directory).mkdir(parents=True, exist_ok=True)
    owned = [p.under_root(f) for f in (profile.server.api_key_file, profile.service.working_directory) if f]
    for action in account.hand_over(owner, owned):  # SGLang, running as that user, reads the key file
        result.add(action, "done")
    current = read_text(p.unit_file)
    if current is not None:
        write_atomic(p.previous_unit, current)
        result.add(f"keep the current unit as {p.previous_unit}", "done")
    write_atomic(p.unit_file, plan.unit.text, 0o644)
    result.add(f"write {p.unit_file}", "done", f"sha256 {plan.unit.sha256[:12]}")
    if systemd.live:
        must(result, "systemctl daemon-reload", systemd.daemon_reload())
    must(result, f"systemctl enable {p.unit}", systemd.enable(p.unit))


def _create_secret(path: Path, profile: Profile, key: str) -> None:
    key = key.strip()
    if any(c in key for c in "\r\n\0"):
        raise KimiServeError(f"${API_KEY_ENV} spans several lines", where=API_KEY_ENV, hint="set it to the key alone")
    admin = new_admin_key() if profile.server.admin_key != "none" else None  # never printed, only in the file
    write_atomic(path, render_key_file(key, admin), 0o600)


def install(plan: Plan, systemd: Systemd, verifier: Verifier, environ: Mapping[str, str]) -> Result:
    result = Result(plan.paths.unit)
    write_unit(plan, systemd, result, environ)
    if plan.now:
        result.new = start_and_verify(plan.candidate, plan.paths, systemd, verifier, result)
        if not result.new.ok:
            result.exit_code = ExitCode.FAILED
            result.add("outcome", "failed", "the new unit did not pass; `kimi-serve restart` would have rolled back "
                       f"(the unit before this install is kept at {plan.paths.previous_unit})")
    return result


def start_and_verify(c: Candidate, paths: ServicePaths, systemd: Systemd, verifier: Verifier, result: Result,
                     label: str = "") -> Outcome:
    """Restart the unit (systemd waits for its ExecStartPost verify), verify from outside, record the outcome;
    a unit that passes becomes the last good one."""
    outcome = Outcome(c.profile, c.sha256)
    done = systemd.restart(paths.unit, timeout=c.restart_timeout)
    if not done.ok:
        outcome.detail = done.describe()
        tail = systemd.journal_tail(paths.unit) if systemd.live else ""
        result.add(f"systemctl restart {paths.unit}{label}", "failed",
                   outcome.detail + (f" | journal: {tail}" if tail else ""))
        record_verify(paths, outcome)
        return outcome
    outcome.started = True
    result.add(f"systemctl restart {paths.unit}{label}", "done", "ExecStartPost verify passed")
    marker = parse_marker(c.text)
    endpoint = marker.endpoint if marker else ""
    secret = paths.under_root(c.api_key_file) if c.api_key_file else None
    outcome.verify_exit, outcome.detail = verifier(endpoint, secret, c.suite, c.verify_timeout)
    result.add(f"kimi-serve verify {endpoint}{label}", "done" if outcome.ok else "failed", outcome.detail)
    record_verify(paths, outcome)
    if outcome.ok:
        write_atomic(paths.last_good_unit, c.text)
        write_record(paths.last_good_record, c.record())
        result.add(f"record {paths.last_good_unit} as the last good unit", "done")
    return outcome


def record_verify(paths: ServicePaths, outcome: Outcome) -> None:
    write_record(paths.last_verify_record, {**outcome.to_json(), "status": "pass" if outcome.ok else "fail"})


def contract_verifier(endpoint: str, secret: Path | None, suite: str, timeout: float) -> tuple[int, str]:
    """The real :data:`Verifier`: ``kimi-serve verify`` against the running unit."""
    from kimi_serve.verify import parse_target, resolve_api_key, run_verify

    report = run_verify(parse_target(endpoint), api_key=resolve_api_key(None, secret), wait=VERIFY_WAIT_AFTER_START,
                        timeout=timeout, suite=suite)
    if report.error is not None:
        return report.exit_code, report.error.message
    bad = [p for p in report.probes if not p.passed]
    if bad:
        return report.exit_code, f"{bad[0].probe} ({bad[0].mode}): {bad[0].reason}"
    if report.exit_code != 0:  # the probes passed, a least-privilege check failed
        return report.exit_code, next(c.line() for c in report.checks if c.status == FAIL)
    return report.exit_code, f"contract holds: {len(report.probes)} probes passed ({report.model or 'model'})"


# ---------------------------------------------------------------------------------------------- uninstall


def uninstall(paths: ServicePaths, systemd: Systemd, *, dry_run: bool) -> Result:
    """Stop, disable and remove the unit and its records; the API-key file and working directory stay."""
    result = Result(paths.unit)
    refuse_foreign(paths)
    if read_text(paths.unit_file) is None:
        result.add(f"{paths.unit_file} is not installed", "skipped", "nothing to do")
        return result
    status = "planned" if dry_run else "done"
    if systemd.live:
        _step(result, f"systemctl stop {paths.unit}", dry_run, lambda: systemd.stop(paths.unit, timeout=3600))
    _step(result, f"systemctl {'' if systemd.live else f'--root={paths.root} '}disable {paths.unit}", dry_run,
          lambda: systemd.disable(paths.unit))
    if not dry_run:
        paths.unit_file.unlink()
    result.add(f"remove {paths.unit_file}", status)
    if systemd.live:
        _step(result, "systemctl daemon-reload", dry_run, systemd.daemon_reload)
        if not dry_run:
            systemd.reset_failed(paths.unit)  # forget a failed state; fails harmlessly when there is none
    if not dry_run:
        shutil.rmtree(paths.state_dir, ignore_errors=True)
    result.add(f"remove the records in {paths.state_dir}", status)
    return result


def _step(result: Result, action: str, dry_run: bool, call: Callable[[], Completed]) -> None:
    if dry_run:
        result.add(action, "planned")
    else:
        must(result, action, call())
