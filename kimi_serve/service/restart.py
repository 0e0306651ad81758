"""The smoke-tested restart: install the new unit, restart, verify; on failure put back the last good unit.

The last good unit is recorded only after a passing verify (:func:`kimi_serve.service.install.start_and_verify`), so a
rollback always returns to a unit that once kept the contract. Exit codes: 0 the new unit passed; 1 it failed and
the last good unit is back and passing; 4 it failed and the service is not serving (no last good unit, or that one
failed too).
"""

from __future__ import annotations

from collections.abc import Mapping

from kimi_serve.core.errors import ExitCode
from kimi_serve.service.install import (
    Candidate,
    Outcome,
    Plan,
    Result,
    Verifier,
    start_and_verify,
    start_monitor,
    write_unit,
)
from kimi_serve.service.state import ServicePaths, read_record, read_text, write_atomic
from kimi_serve.service.systemctl import Systemd


def last_good(paths: ServicePaths) -> Candidate | None:
    text, record = read_text(paths.last_good_unit), read_record(paths.last_good_record)
    if text is None or record is None:
        return None
    try:
        return Candidate.from_record(paths.unit, text, record)
    except (KeyError, TypeError, ValueError):
        return None


def restart(plan: Plan, systemd: Systemd, verifier: Verifier, environ: Mapping[str, str]) -> Result:
    paths = plan.paths
    result = Result(paths.unit)
    previous_good = last_good(paths)
    write_unit(plan, systemd, result, environ)
    result.new = start_and_verify(plan.candidate, paths, systemd, verifier, result)
    start_monitor(plan, systemd, result)
    if result.new.ok:
        return result
    if previous_good is None:
        systemd.stop(paths.unit, timeout=plan.candidate.restart_timeout)
        result.add(f"roll back {paths.unit}", "skipped", "nothing to roll back to: no unit of this name has passed "
                   f"verify yet; stopped {paths.unit} so it does not restart in a loop")
        result.exit_code = ExitCode.SERVER_EXITED
        return result
    result.rollback = roll_back(previous_good, paths, systemd, verifier, result)
    result.exit_code = ExitCode.FAILED if result.rollback.ok else ExitCode.SERVER_EXITED
    return result


def roll_back(good: Candidate, paths: ServicePaths, systemd: Systemd, verifier: Verifier, result: Result) -> Outcome:
    write_atomic(paths.unit_file, good.text, 0o644)
    result.add(f"restore the last good unit (profile {good.profile}, sha256 {good.sha256[:12]})", "done")
    for action, call in (("systemctl daemon-reload", systemd.daemon_reload),
                         (f"systemctl reset-failed {paths.unit}", lambda: systemd.reset_failed(paths.unit))):
        done = call()
        result.add(action, "done" if done.ok else "failed", "" if done.ok else done.describe())
    return start_and_verify(good, paths, systemd, verifier, result, label=" (rollback)")
