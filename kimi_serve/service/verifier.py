"""The contract check `install-service --now` and `restart` run against the started unit, and how a crash of
kimi-serve's own verify (exit 70) is told apart from a contract violation, here and in the unit's ExecStartPost."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode
from kimi_serve.core.proc import Completed
from kimi_serve.service.systemctl import Systemd

INTERNAL_NOTE = "kimi-serve verify crashed (exit 70: a bug in kimi-serve, not a verdict on the server)"
VERIFY_WAIT_AFTER_START = 30.0  # the unit is active (its ExecStartPost passed), so readiness should be immediate


def contract_verifier(
    endpoint: str, secret: Path | None, suite: str, timeout: float, options: tuple[str, ...] = ()
) -> tuple[int, str]:
    """The real verifier: ``kimi-serve verify`` against the running unit, in its own process, so a kimi-serve bug
    in it is its exit 70 (reported as a bug), never an exception in restart's own decisions. ``options``: the
    unit's own further verify options, as its ExecStartPost runs them (the profile's ``--accept-floor``)."""
    from kimi_serve.service.unit import verify_command

    key, wait = str(secret) if secret is not None else None, f"{VERIFY_WAIT_AFTER_START:g}"
    kimi_serve = proc.python_argv(sys.executable, "-m", "kimi_serve")
    argv = verify_command(kimi_serve, endpoint, timeout, suite, key, wait, [*options, "--json"])
    done = proc.run(argv, timeout=VERIFY_WAIT_AFTER_START + timeout + 60)
    return done.rc, verify_summary(done)


def verify_summary(done: Completed) -> str:
    """One line for a verify run: a bug (exit 70) says so; else the report's first error or failed probe."""
    last = (done.err.strip().splitlines() or [""])[-1].strip()
    if done.rc == ExitCode.INTERNAL:
        return f"{INTERNAL_NOTE}: {last}"
    try:
        report = json.loads(done.out)
        if report.get("error"):
            return str(report["error"]["message"])
        bad = [p for p in report.get("probes", []) if p.get("status") != "pass"]
        if bad:
            return f"{bad[0]['probe']} ({bad[0]['mode']}): {bad[0]['findings'][0]['message']}"
        failed_checks = [c for c in report.get("checks", []) if c.get("status") == "fail"]
        if failed_checks:  # the probes passed, a least-privilege check failed
            return f"{failed_checks[0]['message']} (fix: {failed_checks[0]['fix']})"
        if done.rc == 0:
            return f"contract holds: {len(report.get('probes', []))} probes passed ({report.get('model') or 'model'})"
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        pass
    return done.describe()


def post_verify_crashed(systemd: Systemd, unit: str) -> bool:
    """Whether the unit's ExecStartPost (kimi-serve verify) last exited 70, as ``systemctl show`` reports it."""
    shown = systemd.show(unit, ("ExecStartPost",))
    return isinstance(shown, dict) and " status=70" in shown.get("ExecStartPost", "").replace(";", " ")
