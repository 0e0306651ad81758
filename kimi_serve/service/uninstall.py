"""uninstall-service: stop, disable and remove the unit and its records (the API-key file and working directory
stay). Killed part-way, it is simply run again: every step is idempotent and nothing is restored; a unit already
removed still has what it left removed (its records folder, the alert template no timer needs any more)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kimi_serve.core.faults import checkpoint
from kimi_serve.core.files import remove_under
from kimi_serve.core.proc import Completed
from kimi_serve.service import monitor_units as mon
from kimi_serve.service.install import Result, must
from kimi_serve.service.marker import refuse_foreign
from kimi_serve.service.state import ServicePaths, read_text
from kimi_serve.service.systemctl import Systemd


def uninstall(paths: ServicePaths, systemd: Systemd, *, dry_run: bool) -> Result:
    """Stop, disable and remove the unit and its records; the API-key file and working directory stay."""
    result = Result(paths.unit)
    paths.refuse_escape(paths.unit_file, paths.state_dir)  # nothing removed through a link out of the root
    refuse_foreign(paths.unit_file)
    status = "planned" if dry_run else "done"
    if read_text(paths.unit_file) is None:
        return _leftovers(paths, systemd, result, dry_run, status)
    gone = systemd.unreachable()
    if gone:  # a container, a chroot, WSL: remove what kimi-serve wrote; systemctl --root=/ edits the links offline
        systemd = replace(systemd, offline=True)
        result.add(
            f"systemctl stop {paths.unit}",
            "skipped",
            f"systemd is not running here ({gone}); the files and records are removed, nothing could be stopped",
        )
    mon.remove_monitor(paths, systemd, lambda a, d: must(result, a, d), result.add, dry_run=dry_run)
    if systemd.live:
        _step(result, f"systemctl stop {paths.unit}", dry_run, lambda: systemd.stop(paths.unit, timeout=3600))
    _step(
        result,
        f"systemctl {'' if systemd.live else f'--root={paths.root} '}disable {paths.unit}",
        dry_run,
        lambda: systemd.disable(paths.unit),
    )
    if not dry_run:
        checkpoint("service.uninstall.remove")
        remove_under(paths.root, paths.unit_file)
    result.add(f"remove {paths.unit_file}", status)
    if systemd.live:
        _step(result, "systemctl daemon-reload", dry_run, systemd.daemon_reload)
        if not dry_run:
            systemd.reset_failed(paths.unit)  # forget a failed state; fails harmlessly when there is none
    if not dry_run:
        checkpoint("service.uninstall.records")
        remove_under(paths.root, paths.state_dir, tree=True)
    result.add(f"remove the records in {paths.state_dir}", status)
    return result


def _leftovers(paths: ServicePaths, systemd: Systemd, result: Result, dry_run: bool, status: str) -> Result:
    """The unit is gone: what an uninstall killed after removing it left (its records, the alert template)."""
    mon.remove_monitor(paths, systemd, lambda a, d: must(result, a, d), result.add, dry_run=dry_run)
    if paths.state_dir.is_dir():
        if not dry_run:
            remove_under(paths.root, paths.state_dir, tree=True)
        result.add(f"remove the records in {paths.state_dir}", status, "left by an interrupted uninstall")
    if not result.steps:
        result.add(f"{paths.unit_file} is not installed", "skipped", "nothing to do")
    return result


def _step(result: Result, action: str, dry_run: bool, call: Callable[[], Completed]) -> None:
    if dry_run:
        result.add(action, "planned")
    else:
        must(result, action, call())
