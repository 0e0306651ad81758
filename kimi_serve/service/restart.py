"""The smoke-tested restart: install the new unit, restart, verify; on failure put back the last good unit.

The last good unit is recorded only after a passing verify (:func:`kimi_serve.service.install.start_and_verify`), so a
rollback always returns to a unit that once kept the contract. Exit codes: 0 the new unit passed; 1 it failed and
the last good unit is back and passing; 4 it failed and the service is not serving (no last good unit, or that one
failed too); 70 kimi-serve's own verify crashed (here or in the unit's ExecStartPost), so there is no verdict on the
new unit: it is NOT rolled back (the last good unit would be judged by the same broken verifier), not recorded as
last good, and the report says whether it is running.

The whole restart runs inside the intent journal (:mod:`kimi_serve.service.journal`): killed at any step, the next
install-service / restart puts the unit files and records back as they were before it.
"""

from __future__ import annotations

from collections.abc import Mapping

from kimi_serve.core.errors import ExitCode
from kimi_serve.core.faults import checkpoint
from kimi_serve.service.install import (
    Candidate,
    InstallOutcome,
    Plan,
    Result,
    Verifier,
    journal_scope,
    start_and_verify,
    start_monitor,
    write_unit,
)
from kimi_serve.service.state import ServicePaths, read_record, read_text, write_atomic
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.verifier import INTERNAL_NOTE


def last_good(paths: ServicePaths) -> Candidate | None:
    text, record = read_text(paths.last_good_unit), read_record(paths.last_good_record)
    if text is None or record is None:
        return None
    try:
        return Candidate.from_record(paths.unit, text, record)
    except (KeyError, TypeError, ValueError):
        return None


def restart(plan: Plan, systemd: Systemd, verifier: Verifier, environ: Mapping[str, str]) -> Result:
    with journal_scope([plan], systemd, "restart"):
        return _restart(plan, systemd, verifier, environ)


def _restart(plan: Plan, systemd: Systemd, verifier: Verifier, environ: Mapping[str, str]) -> Result:
    paths = plan.paths
    result = Result(paths.unit)
    previous_good = last_good(paths)
    write_unit(plan, systemd, result, environ)
    result.new = start_and_verify(plan.candidate, paths, systemd, verifier, result)
    start_monitor(plan, systemd, result)
    if result.new.ok:
        return result
    if result.new.internal:
        state = (
            "it is running but unverified" if result.new.started else "systemd stopped it (its ExecStartPost failed)"
        )
        result.add(
            f"roll back {paths.unit}",
            "skipped",
            f"{INTERNAL_NOTE}: the new unit was not judged, so it is not "
            f"rolled back ({state}) and not recorded as last good; the last good unit would be checked by the "
            "same broken verifier. Report the traceback it names; check by hand with `kimi-serve verify`",
        )
        result.exit_code = ExitCode.INTERNAL
        return result
    if previous_good is None:
        systemd.stop(paths.unit, timeout=plan.candidate.restart_timeout)
        result.add(
            f"roll back {paths.unit}",
            "skipped",
            "nothing to roll back to: no unit of this name has passed "
            f"verify yet; stopped {paths.unit} so it does not restart in a loop",
        )
        result.exit_code = ExitCode.SERVER_EXITED
        return result
    result.rollback = roll_back(previous_good, paths, systemd, verifier, result)
    result.exit_code = (
        ExitCode.FAILED
        if result.rollback.ok
        else ExitCode.INTERNAL
        if result.rollback.internal
        else ExitCode.SERVER_EXITED
    )
    return result


def roll_back(
    good: Candidate, paths: ServicePaths, systemd: Systemd, verifier: Verifier, result: Result
) -> InstallOutcome:
    checkpoint("service.rollback")
    write_atomic(paths, paths.unit_file, good.text, 0o644)
    result.add(f"restore the last good unit (profile {good.profile}, sha256 {good.sha256[:12]})", "done")
    for action, call in (
        ("systemctl daemon-reload", systemd.daemon_reload),
        (f"systemctl reset-failed {paths.unit}", lambda: systemd.reset_failed(paths.unit)),
    ):
        done = call()
        result.add(action, "done" if done.ok else "failed", "" if done.ok else done.describe())
    return start_and_verify(good, paths, systemd, verifier, result, label=" (rollback)")
