"""The steps of install-service and restart for one unit: a :class:`Plan` (its text, the key file it would create),
which ``--dry-run`` prints without touching anything, then applied step by step, each step an
:class:`~kimi_serve.core.report.Action` in a :class:`Result`. :mod:`kimi_serve.service.fleet` plans every unit of a
deployment; host paths come from a root (:class:`ServicePaths`), processes from a ``Runner`` (:class:`Systemd`), the
contract check from a ``Verifier``; the restart with rollback is :mod:`kimi_serve.service.restart`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kimi_serve.check.owned_paths import refuse_owned_paths
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.files import mkdir_under
from kimi_serve.core.findings import Finding, error_from
from kimi_serve.core.proc import Completed
from kimi_serve.core.report import Action, json_meta, to_json
from kimi_serve.core.settings import API_KEY_ENV, current, from_env
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.member import Role, parse_role
from kimi_serve.service import account
from kimi_serve.service import monitor_units as mon
from kimi_serve.service.marker import parse_marker
from kimi_serve.service.secret import create_secret
from kimi_serve.service.state import ServicePaths, read_text, write_atomic, write_record
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.timeouts import restart_wait_sec
from kimi_serve.service.unit import RenderedUnit, UnitContext, floor_args, unit_reach
from kimi_serve.service.verifier import INTERNAL_NOTE, post_verify_crashed

# (endpoint HOST:PORT, API-key file or None, suite, timeout, further verify options: the draft's floor)
#   -> (verify exit code, one-line summary)
Verifier = Callable[[str, Path | None, str, float, tuple[str, ...]], tuple[int, str]]


@dataclass(frozen=True)
class Candidate:
    """A unit to bring up and how to verify it: a freshly rendered one, or the last good one from the record (its
    JSON: the record's fields)."""

    name: str = field(metadata=json_meta(omit=True))
    text: str = field(metadata=json_meta(omit=True))
    sha256: str = field(metadata=json_meta(key="unit_sha256"))
    profile: str
    patch_set: str | None
    api_key_file: str | None
    suite: str
    verify_timeout: float
    restart_timeout: float
    # the profile's --accept-floor where it is not verify's default (a record of the default has no key: as before)
    verify_args: tuple[str, ...] = field(
        default=(), metadata=json_meta(encode=lambda a: list(a) or None, omit_none=True)
    )

    @classmethod
    def from_record(cls, name: str, text: str, record: Mapping[str, Any]) -> Candidate:
        return cls(
            name,
            text,
            str(record["unit_sha256"]),
            str(record["profile"]),
            record.get("patch_set"),
            record.get("api_key_file"),
            str(record["suite"]),
            float(record["verify_timeout"]),
            float(record["restart_timeout"]),
            tuple(str(a) for a in record.get("verify_args") or ()),
        )


@dataclass(frozen=True)
class Plan:
    profile: Profile
    unit: RenderedUnit
    paths: ServicePaths
    create_secret: bool
    now: bool
    monitor: mon.MonitorUnits | None = None  # the verify timer's units (profile monitor:), None when opted out

    @property
    def candidate(self) -> Candidate:
        p = self.profile
        return Candidate(
            self.unit.name,
            self.unit.text,
            self.unit.sha256,
            p.name,
            "+".join(p.patch_set) or None,  # the sets, as the unit's marker names them
            p.server.api_key_file,
            p.verify.suite,
            float(p.verify.timeout),
            restart_wait_sec(p),
            tuple(floor_args(p)),
        )


@dataclass
class InstallOutcome:
    """What happened to one unit (the new one, or the last good one put back)."""

    profile: str
    unit_sha256: str
    started: bool = False
    verify_exit: int | None = field(default=None, metadata=json_meta(key="verify_exit_code"))
    detail: str = ""
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("ok",)

    @property
    def ok(self) -> bool:
        return self.started and self.verify_exit == 0

    @property
    def internal(self) -> bool:
        """The verdict is missing because kimi-serve's verify crashed (exit 70), here or in ExecStartPost."""
        return self.verify_exit == ExitCode.INTERNAL


@dataclass
class Result:
    unit: str
    steps: list[Action] = field(default_factory=list)
    new: InstallOutcome | None = None
    rollback: InstallOutcome | None = None
    exit_code: ExitCode = ExitCode.OK

    def add(self, action: str, status: str, detail: str = "") -> None:
        self.steps.append(Action(action, status, detail))


# ---------------------------------------------------------------------------------------------- planning


def reach_step(
    profile: Profile,
    launches: list[Launch],
    ctx: UnitContext,
    systemd: Systemd,
    environ: Mapping[str, str],
    preview: bool,
    found: list[Finding],
) -> None:
    """Can each unit's own user, in its sandbox, start it (:func:`kimi_serve.service.unit.unit_reach`)? A unit that
    cannot (203/EXEC, restart loops, a rollback to the same flaw) is refused before anything is written (exit 5); a
    preview lists why."""
    # the system the units run on: the install root, or the live one whose users kimi-serve manages (a container's
    # root seen from its host, $KIMI_SERVE_ACCOUNTS_ROOT), whose files the unit sees
    system = account.roots(systemd.root, systemd.live, from_env(environ).accounts_root)[0]
    reach = {f.line(): f for one in launches for f in unit_reach(profile, one, ctx, system)}
    if reach and not preview:
        raise error_from(
            list(reach.values()), more="kimi-serve install-service --dry-run", exit_code=ExitCode.ENVIRONMENT
        )
    found += reach.values()


def planned_actions(plan: Plan, systemd: Systemd) -> list[str]:
    """What applying ``plan`` does, in order (``--dry-run`` prints these)."""
    p = plan.paths
    actions: list[str] = []
    if plan.create_secret:
        admin = " and a new random admin-api-key" if plan.profile.server.admin_key != "none" else ""
        secret = p.under_root(plan.profile.server.api_key_file or "")
        actions.append(f"create {secret} (mode 0600) with the key from ${API_KEY_ENV}{admin}")
    actions += account.planned(plan.profile.service.user, *account.roots(p.root, systemd.live, Path("/")))
    actions.append(f"create working directory {p.under_root(plan.profile.service.working_directory)} if missing")
    if p.unit_file.exists() and read_text(p.unit_file) != plan.unit.text:
        actions.append(f"keep the current unit as {p.previous_unit}")
    actions.append(f"write {p.unit_file} atomically (sha256 {plan.unit.sha256[:12]})")
    if systemd.live:
        actions.append("systemctl daemon-reload")
    actions.append(f"systemctl {'' if systemd.live else f'--root={p.root} '}enable {p.unit}")
    actions += mon.planned_monitor(plan.monitor, p, plan.now and systemd.live)
    if plan.now:
        actions.append(f"systemctl restart {p.unit} (returns once ExecStartPost kimi-serve verify passed)")
        actions.append("kimi-serve verify; on a pass record this unit as the last good one")
    return actions


# ---------------------------------------------------------------------------------------------- applying


def start_monitor(plan: Plan, systemd: Systemd, result: Result) -> None:
    mon.enable_monitor(plan.monitor, plan.paths, systemd, lambda a, d: must(result, a, d), result.add, start=True)


def must(result: Result, action: str, done: Completed) -> None:
    if done.ok:
        result.add(action, "done")
        return
    result.add(action, "failed", done.describe())
    raise KimiServeError(
        done.describe(),
        where=action,
        hint="fix the host problem it names and run it again",
        exit_code=ExitCode.ENVIRONMENT,
    )


def write_unit(plan: Plan, systemd: Systemd, result: Result, environ: Mapping[str, str]) -> None:
    """Secret (if planned), working dir, unit file (keeping the previous one), daemon-reload, enable."""
    p, profile = plan.paths, plan.profile
    refuse_owned_paths(profile, p.root)  # again right before the chown, whatever the plan was built from
    mon.refuse_links(plan.monitor, p)  # nothing written through a link out of the root
    checkpoint("service.write.start")
    user, roots = profile.service.user, account.roots(p.root, systemd.live, from_env(environ).accounts_root)
    owner, done = account.ensure(
        user, profile.service.working_directory, accounts_root=roots[0], dev_root=roots[1], runner=systemd.runner
    )
    for action in done:
        result.add(action, "done")
    checkpoint("service.write.account")
    if plan.create_secret and profile.server.api_key_file:
        create_secret(p.under_root(profile.server.api_key_file), profile, environ.get(API_KEY_ENV, ""), p.root)
        result.add(f"create {profile.server.api_key_file} (0600)", "done")
    mkdir_under(p.root, p.under_root(profile.service.working_directory))
    checkpoint("service.write.workdir")
    owned = [p.under_root(f) for f in (profile.server.api_key_file, profile.service.working_directory) if f]
    for action in account.hand_over(owner, owned, p.root):  # SGLang, running as that user, reads the key file
        result.add(action, "done")
    current = read_text(p.unit_file)
    # the unit before the last CHANGE: writing the same text again (a restart of an unchanged unit, a killed rolling
    # restart run again) must not replace it with a copy of the current one, or the last different unit is lost
    if current is not None and current != plan.unit.text:
        write_atomic(p, p.previous_unit, current)
        result.add(f"keep the current unit as {p.previous_unit}", "done")
    write_atomic(p, p.unit_file, plan.unit.text, 0o644)
    result.add(f"write {p.unit_file}", "done", f"sha256 {plan.unit.sha256[:12]}")
    mon.write_monitor(plan.monitor, p, result.add)
    if systemd.live:
        must(result, "systemctl daemon-reload", systemd.daemon_reload())
        checkpoint("service.write.daemon-reload")
    mkdir_under(p.root, p.unit_file.parent)  # the .wants links systemctl writes: the folder still the root's own
    must(result, f"systemctl enable {p.unit}", systemd.enable(p.unit))
    checkpoint("service.write.enabled")
    mon.enable_monitor(plan.monitor, p, systemd, lambda a, d: must(result, a, d), result.add, start=False)


def journal_scope(plans: Sequence[Plan], systemd: Systemd, op: str) -> contextlib.AbstractContextManager[None]:
    """The intent journals around a change of these plans' units, the first one the anchor
    (:mod:`kimi_serve.service.journal`)."""
    from kimi_serve.service.journal import journalled

    changes = []
    for plan in plans:
        p, secret, service = plan.paths, plan.profile.server.api_key_file, plan.profile.service
        accounts_root = account.roots(p.root, systemd.live, current().accounts_root)[0]
        kw = {
            "secret": p.under_root(secret) if secret and plan.create_secret else None,
            "workdir": p.under_root(service.working_directory),
            "user": (service.user, accounts_root),
        }
        changes.append((p, kw))
    return journalled(changes, op)


def warn_in(result: Result, findings: Sequence[Finding]) -> None:
    """The plan's warnings that concern the change itself (the engine's kimi-serve out of date), as report lines."""
    for f in findings:
        if f.code == "unit.kimi_serve":
            result.add(f.message, "warning", f"fix: {f.fix}")


def start_and_verify(
    c: Candidate, paths: ServicePaths, systemd: Systemd, verifier: Verifier, result: Result, label: str = ""
) -> InstallOutcome:
    """Restart the unit (systemd waits for its ExecStartPost verify), verify from outside, record the outcome;
    a unit that passes becomes the last good one."""
    outcome = InstallOutcome(c.profile, c.sha256)
    checkpoint("service.restart")
    done = systemd.restart(paths.unit, timeout=c.restart_timeout)
    if not done.ok:
        outcome.detail = done.describe()
        if systemd.live and post_verify_crashed(systemd, paths.unit):
            outcome.verify_exit = int(ExitCode.INTERNAL)
            outcome.detail = f"ExecStartPost {INTERNAL_NOTE}; systemd stopped the unit: {outcome.detail}"
        tail = systemd.journal_tail(paths.unit) if systemd.live else ""
        result.add(
            f"systemctl restart {paths.unit}{label}", "failed", outcome.detail + (f" | journal: {tail}" if tail else "")
        )
        record_verify(paths, outcome)
        return outcome
    outcome.started = True
    result.add(f"systemctl restart {paths.unit}{label}", "done", "ExecStartPost verify passed")
    marker = parse_marker(c.text)
    endpoint = marker.endpoint if marker else ""
    secret = paths.under_root(c.api_key_file) if c.api_key_file else None
    checkpoint("service.verify")
    member = parse_role(marker.role) if marker else None
    if member is not None and member[0] is Role.RANK and member[1] != 0:
        outcome.verify_exit = 0
        outcome.detail = "joined rank 0 (its ExecStartPost wait-joined passed); a rank >= 1 serves no API to verify: "
        outcome.detail += "rank 0's contract check covers it"
    else:
        outcome.verify_exit, outcome.detail = verifier(endpoint, secret, c.suite, c.verify_timeout, c.verify_args)
    result.add(f"kimi-serve verify {endpoint}{label}", "done" if outcome.ok else "failed", outcome.detail)
    record_verify(paths, outcome)
    checkpoint("service.verified")
    if outcome.ok:
        write_atomic(paths, paths.last_good_unit, c.text)
        write_record(paths, paths.last_good_record, to_json(c))
        result.add(f"record {paths.last_good_unit} as the last good unit", "done")
    return outcome


def record_verify(paths: ServicePaths, outcome: InstallOutcome) -> None:
    write_record(paths, paths.last_verify_record, {**to_json(outcome), "status": "pass" if outcome.ok else "fail"})
