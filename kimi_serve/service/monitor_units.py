"""The monitoring units installed beside the main unit (docs/monitoring.md): ``NAME-verify.service`` (a oneshot
``kimi-serve verify`` writing the metrics file and the history), ``NAME-verify.timer`` and the shared
``kimi-serve-alert@.service`` template its ``OnFailure=`` starts. Rendered from ``systemd/kimi-serve-*.j2`` with the
main unit's escaping helpers and marker line, so ``status`` and uninstall recognise them as kimi-serve's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.faults import checkpoint
from kimi_serve.core.files import link_refused, mkdir_under, remove_under
from kimi_serve.core.proc import Completed
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.service.hardening import client_sandbox
from kimi_serve.service.marker import parse_marker, refuse_foreign
from kimi_serve.service.state import ServicePaths, read_text, write_atomic
from kimi_serve.service.systemctl import SYSTEMCTL_TIMEOUT, Systemd
from kimi_serve.service.systemd_text import environment_line, exec_line, quote, specifiers
from kimi_serve.service.unit import (
    RenderedUnit,
    UnitContext,
    floor_args,
    marker_fields,
    render_template,
    verify_command,
)

ALERT_UNIT = "kimi-serve-alert@.service"
DEFAULT_METRICS_DIR = "/var/lib/prometheus/node-exporter"  # Debian's node_exporter --collector.textfile.directory
KEY_CREDENTIAL = "api-key.yaml"  # LoadCredential= name of the profile's key file (SGLang's --config YAML)
STUCK_MARGIN = 60  # TimeoutStartSec beyond the check's own --timeout


@dataclass(frozen=True)
class MonitorUnits:
    service: RenderedUnit
    timer: RenderedUnit
    alert: RenderedUnit
    metrics_file: str
    interval: int
    writable: tuple[str, ...] = ()  # the verify oneshot's ReadWritePaths= (created by install: root's, 0755)

    @property
    def files(self) -> tuple[RenderedUnit, ...]:
        return self.service, self.timer, self.alert


def monitor_names(unit: str) -> tuple[str, str]:
    """(verify service, timer) for main unit ``NAME.service``."""
    base = unit.removesuffix(".service")
    return f"{base}-verify.service", f"{base}-verify.timer"


def metrics_file(profile: Profile, unit: str) -> str:
    return profile.monitor.metrics_file or f"{DEFAULT_METRICS_DIR}/kimi-serve-{unit.removesuffix('.service')}.prom"


def credential_path(unit: str) -> str:
    """Where systemd hands the verify oneshot its copy of the key file ($CREDENTIALS_DIRECTORY, systemd.exec(5))."""
    return f"/run/credentials/{monitor_names(unit)[0]}/{KEY_CREDENTIAL}"


def record_dirs(profile: Profile, unit: str) -> tuple[str, str]:
    """(the unit's state directory, the metrics file's directory): all the verify oneshot may write."""
    return str(ServicePaths(Path("/"), unit).state_dir), str(Path(metrics_file(profile, unit)).parent)


def monitor_argv(profile: Profile, launch: Launch, ctx: UnitContext, unit: str) -> list[str]:
    """The check the timer runs: bounded (quick suite, capped max_tokens, its own timeout), no readiness wait. The key
    is systemd's copy of the key file (LoadCredential=): the file is the service user's, 0600."""
    m, key = profile.monitor, credential_path(unit) if launch.api_key_file else None
    extra = ["--max-tokens", str(m.max_tokens), "--metrics-file", metrics_file(profile, unit)]
    extra += ["--profile", profile.name, "--unit-name", unit, *floor_args(profile)]
    return verify_command([ctx.kimi_serve], launch.endpoint, m.timeout, m.suite, key, extra=extra)


def render_monitor(profile: Profile, launch: Launch, ctx: UnitContext, unit: str) -> MonitorUnits | None:
    """The three monitoring units for main unit ``unit``; None when the profile opts out (monitor.enabled false)."""
    m = profile.monitor
    if not m.enabled:
        return None
    service, timer = monitor_names(unit)
    fields = marker_fields(ctx, profile, launch.endpoint)
    common = {"main_unit": unit, "timer_unit": timer, "service_unit": service}
    what = specifiers(f"kimi-serve contract check of {unit} (profile {profile.name})", profile.where("monitor"))
    key = launch.api_key_file
    svc = render_template(
        "kimi-serve-verify.service.j2",
        {
            # root, not service.user: the check appends to kimi-serve's own records (root-owned, so the server's user
            # can never forge a "last good" unit) and writes the node_exporter directory; it talks HTTP to the server.
            # Root without capabilities, in a sandbox that leaves only those two directories writable.
            **common,
            "description": what,
            "user": "root",
            "credentials": (
                [f"{KEY_CREDENTIAL}:{specifiers(key, profile.where('server.api_key_file'))}"] if key else []
            ),
            "hardening": [f"{k}={v}" for k, v in client_sandbox(quote("-" + d) for d in record_dirs(profile, unit))],
            "environment": [environment_line("PYTHONUNBUFFERED", "1", "monitor")],
            "exec_start": exec_line(monitor_argv(profile, launch, ctx, unit), profile.where("monitor")),
            "timeout_start_sec": int(m.timeout) + STUCK_MARGIN,
            "syslog_identifier": service.removesuffix(".service"),
        },
        service,
        fields,
    )
    tmr = render_template(
        "kimi-serve-verify.timer.j2",
        {
            **common,
            "description": f"Every {m.interval}s: {what}",
            "interval": m.interval,
            "randomized_delay": m.randomized_delay,
        },
        timer,
        fields,
    )
    alert = render_template(
        "kimi-serve-alert@.service.j2",
        {"hardening": ["DynamicUser=yes", *(f"{k}={v}" for k, v in client_sandbox(()))]},
        ALERT_UNIT,
        {"version": ctx.version, "profile": "-", "patch_set": "-", "endpoint": "-"},
    )
    return MonitorUnits(svc, tmr, alert, metrics_file(profile, unit), int(m.interval), record_dirs(profile, unit))


def analyze_together(systemd: Systemd, units: list[RenderedUnit]) -> None:
    """``systemd-analyze verify`` on the units side by side (the timer names its service, OnFailure= the template);
    any stderr is a failure."""
    with tempfile.TemporaryDirectory(prefix="kimi-serve-units-") as tmp:
        files = []
        for unit in units:
            path = Path(tmp) / unit.name
            path.write_text(unit.text, encoding="utf-8")
            files.append(path)
        done = systemd.runner(["systemd-analyze", "verify", *map(str, files)], timeout=SYSTEMCTL_TIMEOUT)
    complaints = [line.replace(f"{tmp}/", "") for line in done.err.strip().splitlines()]
    if done.rc != 0 or complaints:
        first = complaints[0] if complaints else f"exit status {done.rc}"
        raise KimiServeError(
            f"systemd-analyze verify rejects the rendered units: {first}",
            where=units[0].name,
            hint="fix the profile value it names",
            exit_code=ExitCode.FAILED,
        )


def refuse_foreign_monitor(paths: ServicePaths) -> None:
    for name in monitor_names(paths.unit):  # an alert template of the operator's own is kept, never refused
        refuse_foreign(paths.unit_path(name))


Step = Callable[[str, str, str], None]  # Result.add
Must = Callable[[str, Completed], None]


def planned_monitor(monitor: MonitorUnits | None, paths: ServicePaths, now: bool) -> list[str]:
    if monitor is None:
        return [f"remove the monitoring units of {paths.unit} (monitor.enabled is false)"] if _installed(paths) else []
    names = ", ".join(u.name for u in monitor.files)
    return [
        f"create {' and '.join(str(paths.under_root(d)) for d in monitor.writable)} if missing (root's, 0755: the "
        "check's only writable paths)",
        f"write {names} in {paths.unit_path('')} (contract check every {monitor.interval}s, metrics in "
        f"{paths.under_root(monitor.metrics_file)})",
        f"systemctl enable {monitor.timer.name}" + (f"; systemctl restart {monitor.timer.name}" if now else ""),
    ]


def _installed(paths: ServicePaths) -> bool:
    return any(paths.unit_path(n).exists() for n in monitor_names(paths.unit))


def refuse_links(monitor: MonitorUnits | None, paths: ServicePaths) -> None:
    """Exit 5 before anything is written when the unit, its records or what :func:`write_monitor` writes or creates
    is reached through a link out of the root, or a folder to create is a dangling link."""
    folders = [paths.under_root(d) for d in monitor.writable] if monitor else []
    units = [paths.unit_path(u.name) for u in monitor.files] if monitor else []
    paths.refuse_escape(paths.unit_file, paths.state_dir, *units, *folders)
    for target in folders:
        if target.is_symlink() and not target.is_dir():
            raise link_refused(
                target, f"a symbolic link to {os.readlink(target)}, which does not exist", f"rm {target}"
            )


def write_monitor(monitor: MonitorUnits | None, paths: ServicePaths, add: Step) -> None:
    """Write the units (before daemon-reload); an alert template the operator replaced is kept."""
    if monitor is None:
        return
    for directory in monitor.writable:  # ProtectSystem=strict: the check cannot create them itself
        target = paths.under_root(directory)
        if not target.is_dir():
            mkdir_under(paths.root, target, 0o755)
            add(f"create {target}", "done", "")
    for unit in monitor.files:
        path = paths.unit_path(unit.name)
        current = read_text(path)
        if unit.name == ALERT_UNIT and current is not None and parse_marker(current) is None:
            add(f"keep {path}", "skipped", "not written by kimi-serve (the operator's own hook)")
            continue
        write_atomic(paths, path, unit.text, 0o644)
        add(f"write {path}", "done", f"sha256 {unit.sha256[:12]}")


def enable_monitor(
    monitor: MonitorUnits | None, paths: ServicePaths, systemd: Systemd, must: Must, add: Step, start: bool
) -> None:
    """Enable the timer (after the main unit); with ``start``, (re)start it on the running system. Without a
    monitor, remove units a previous install left (the profile opted out since)."""
    if monitor is None:
        if _installed(paths):
            remove_monitor(paths, systemd, must, add, dry_run=False)
        return
    must(f"systemctl enable {monitor.timer.name}", systemd.enable(monitor.timer.name))
    if start and systemd.live:
        must(f"systemctl restart {monitor.timer.name}", systemd.restart(monitor.timer.name, SYSTEMCTL_TIMEOUT))


def remove_monitor(paths: ServicePaths, systemd: Systemd, must: Must, add: Step, *, dry_run: bool) -> None:
    """Stop and disable the timer, remove both monitoring units, and the alert template once no kimi-serve timer
    is left in the unit directory (also when the timer was gone already: an uninstall killed before it removed the
    template). The metrics file stays (node_exporter may still read it)."""
    service, timer = monitor_names(paths.unit)
    if not _installed(paths):
        _remove_alert(paths, timer, add, dry_run=dry_run)
        return
    refuse_foreign_monitor(paths)
    status = "planned" if dry_run else "done"

    def step(action: str, call: Callable[[], Completed]) -> None:
        if dry_run:
            add(action, "planned", "")
        else:
            must(action, call())

    if systemd.live:
        stop = ["systemctl", "stop", timer, service]
        step(" ".join(stop), lambda: systemd.runner(stop, timeout=SYSTEMCTL_TIMEOUT))
    step(f"systemctl {'' if systemd.live else f'--root={paths.root} '}disable {timer}", lambda: systemd.disable(timer))
    for name in (timer, service):
        if not dry_run:
            remove_under(paths.root, paths.unit_path(name))
        add(f"remove {paths.unit_path(name)}", status, "")
    if not dry_run:
        checkpoint("service.monitor.removed")
    _remove_alert(paths, timer, add, dry_run=dry_run)
    if systemd.live and not dry_run:
        systemd.reset_failed(service)


def _remove_alert(paths: ServicePaths, timer: str, add: Step, *, dry_run: bool) -> None:
    """The alert template kimi-serve wrote, once no kimi-serve contract check but ``timer`` (going) uses it."""
    alert = paths.unit_path(ALERT_UNIT)
    others = [p for p in alert.parent.glob("*-verify.timer") if p.name != timer]
    text = read_text(alert)
    if text is not None and parse_marker(text) is not None and not others:
        if not dry_run:
            remove_under(paths.root, alert)
        add(f"remove {alert}", "planned" if dry_run else "done", "no other kimi-serve contract check uses it")
