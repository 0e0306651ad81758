"""`kimi-serve status`: the unit's state, the live profile and patch set, the last verify, /health right now, and a
change that was killed part-way (its journal)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.report import to_json
from kimi_serve.service.history import read_history, summary
from kimi_serve.service.journal import read_intent
from kimi_serve.service.marker import Marker, parse_marker
from kimi_serve.service.monitor_units import monitor_names
from kimi_serve.service.state import ServicePaths, read_record, read_text
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.traffic import read_state as read_traffic
from kimi_serve.service.traffic import summary as traffic_summary

PROPS = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "NRestarts",
    "Result",
    "ActiveEnterTimestamp",
)
HEALTH_TIMEOUT = 3.0
# what systemctl prints where systemd is not PID 1 or its bus cannot be reached (a container, a chroot, no D-Bus)
_NO_SYSTEMD = re.compile(r"Failed to connect to bus|System has not been booted with systemd|Host is down", re.I)
TIMER_PROPS = ("ActiveState", "UnitFileState", "LastTriggerUSec", "NextElapseUSecRealtime")


@dataclass
class Status:
    unit: str
    unit_file: str
    installed: bool
    marker: Marker | None = None
    state: dict[str, str] = field(default_factory=dict)
    state_error: str = ""
    last_verify: dict[str, Any] | None = None
    last_good: dict[str, Any] | None = None
    health: str = ""  # ready | refused | warming | ... ; "" when not checked
    interrupted: dict[str, Any] | None = None  # the journal of a change killed part-way (service.journal)
    monitor: dict[str, Any] | None = None  # history.summary(): last checks, when the contract last held, broken for
    traffic: dict[str, Any] | None = None  # traffic.summary(): parse-failure log lines of real traffic, counted
    timer: dict[str, Any] | None = None  # the verify timer: its unit and state (None: not installed)
    listeners: list[Any] | None = None  # verify.listeners.Listener of the server's process tree; None: not checked
    listener_findings: list[Any] = field(default_factory=list)  # stray_listener warnings, or why not checked

    def findings(self) -> list[Finding]:
        """Why the status is not OK, one line each with the fix (empty when it is)."""
        out: list[Finding] = []

        def fail(code: str, message: str, fix: str) -> None:
            out.append(Finding("status", code, FAIL, message, fix))

        if not self.installed:
            fail(
                "unit.not_installed",
                f"{self.unit} is not installed ({self.unit_file})",
                "kimi-serve install-service --profile P; a foreground `up` is listed under runs",
            )
        if self.state_error and _NO_SYSTEMD.search(self.state_error):
            fail(
                "systemd.unreachable",
                "systemd is not reachable here (systemctl: cannot connect to the system bus; PID 1 is not systemd)",
                "run status on the host whose systemd runs the unit (or as a user allowed on its bus); "
                "pass --root DIR to read an offline tree",
            )
        elif self.state_error and self.installed:
            fail("unit.state", self.state_error, "see systemctl status " + self.unit)
        elif self.state and self.state.get("ActiveState") != "active":
            fail(
                "unit.inactive",
                f"{self.unit} is {self.state.get('ActiveState')} ({self.state.get('SubState')})",
                f"kimi-serve restart --profile {self.marker.profile if self.marker else 'P'}; journalctl -u "
                f"{self.unit}",
            )
        elif self.state and self.health != "ready":
            fail(
                "health",
                f"/health is {self.health or 'not checked'}",
                f"kimi-serve logs --unit-name {self.unit.removesuffix('.service')}",
            )
        if self.interrupted:
            fail(
                "interrupted",
                f"a {self.interrupted.get('op')} was interrupted part-way",
                "run install-service, uninstall-service or restart again: it rolls the change back first",
            )
        return out

    @property
    def exit_code(self) -> ExitCode:
        """0 when the unit is active and /health answers 200; 1 otherwise."""
        ok = self.state.get("ActiveState") == "active" and self.health == "ready" and not self.interrupted
        return ExitCode.OK if ok else ExitCode.FAILED

    def rows(self) -> list[tuple[str, str]]:
        """What `status` prints, one (label, value) per line."""
        m = self.marker
        rows = [("unit", f"{self.unit} ({self.unit_file}{'' if self.installed else ', not installed'})")]
        if self.installed:
            rows.append(
                (
                    "profile",
                    f"{m.profile} (patch set {m.patch_set}, kimi-serve {m.version})"
                    if m
                    else "unknown: not written by kimi-serve",
                )
            )
            if m and m.overrides:
                rows.append(("overrides", " ".join(f"--set {o}" for o in m.overrides)))
            if m and not m.body_matches:
                rows.append(("edited", "the unit was edited after install (its hash no longer matches)"))
        s = self.state
        rows.append(
            (
                "state",
                f"{s.get('ActiveState')} ({s.get('SubState')}), {s.get('UnitFileState')}, main pid "
                f"{s.get('MainPID')}, restarts {s.get('NRestarts')}, since {s.get('ActiveEnterTimestamp') or '-'}"
                if s
                else next((f.line() for f in self.findings() if f.code == "systemd.unreachable"), self.state_error),
            )
        )
        rows.append(("health", f"{self.health} ({m.endpoint if m else ''}/health)" if self.health else "not checked"))
        v, g = self.last_verify, self.last_good
        verdict = f"{v.get('status')} at {v.get('time')} (profile {v.get('profile')})" if v is not None else ""
        rows.append(("last verify", f"{verdict}: {v.get('detail')}" if v is not None else "none recorded"))
        rows.append(
            (
                "last good",
                f"profile {g.get('profile')} (patch set {g.get('patch_set')}, sha256 "
                f"{str(g.get('unit_sha256'))[:12]}) at {g.get('time')}"
                if g is not None
                else "none recorded",
            )
        )
        if self.interrupted:
            from kimi_serve.service.journal import describe

            rows.append(("INTERRUPTED", describe(self.interrupted)))
        rows += _monitor_rows(self)
        if self.listeners is not None:
            rows.append(("listening", ", ".join(f"{x.endpoint} ({x.command})" for x in self.listeners) or "nothing"))
        rows += [("stray", f.line()) for f in self.listener_findings if f.status == "warn"]
        return rows

    def to_json(self) -> dict[str, Any]:
        m = self.marker
        return {
            "version": 1,
            "unit": self.unit,
            "unit_file": self.unit_file,
            "installed": self.installed,
            "written_by_kimi_serve": m is not None,
            "edited_since_install": bool(m and not m.body_matches),
            "profile": m.profile if m else None,
            "overrides": list(m.overrides) if m else [],
            "patch_set": m.patch_set if m else None,
            "kimi_serve_version": m.version if m else None,
            "endpoint": m.endpoint if m else None,
            "state": self.state or None,
            "state_error": self.state_error or None,
            "health": self.health or None,
            "last_verify": self.last_verify,
            "last_good": self.last_good,
            "monitor": self.monitor,
            "traffic": self.traffic,
            "timer": self.timer,
            "exit_code": int(self.exit_code),
            "listeners": to_json(self.listeners) if self.listeners is not None else None,
            "listener_findings": to_json(self.listener_findings),
            "interrupted": (
                {k: self.interrupted.get(k) for k in ("op", "pid", "started_at")} if self.interrupted else None
            ),
        }


def status(paths: ServicePaths, systemd: Systemd) -> Status:
    text = read_text(paths.unit_file)
    st = Status(paths.unit, str(paths.unit_file), text is not None)
    st.marker = parse_marker(text) if text is not None else None
    st.last_verify = read_record(paths.last_verify_record)
    st.last_good = read_record(paths.last_good_record)
    st.interrupted = read_intent(paths)
    st.monitor = summary(read_history(paths), time.time())
    st.traffic = traffic_summary(read_traffic(paths))
    timer = monitor_names(paths.unit)[1]
    if paths.unit_path(timer).exists():
        st.timer = {"unit": timer}
        shown_timer = systemd.show(timer, TIMER_PROPS) if systemd.live else None
        if isinstance(shown_timer, dict):
            st.timer.update(shown_timer)
    if not systemd.live:
        st.state_error = f"--root {paths.root} is not the running system: unit state not queried"
        return st
    shown = systemd.show(paths.unit, PROPS)
    if isinstance(shown, dict):
        st.state = shown
    else:
        st.state_error = shown.describe().replace("\n", " ")
    if st.marker and st.state.get("ActiveState") in ("active", "activating", "reloading"):
        st.health = health_phase(st.marker.endpoint)
        st.listeners, st.listener_findings = _listeners(st.marker.endpoint)
    return st


def _listeners(endpoint: str) -> tuple[list[Any] | None, list[Any]]:
    """The sockets the server's process tree listens on, and a warning per one beyond loopback besides the API port."""
    from urllib.parse import urlsplit

    from kimi_serve.core.findings import SKIP
    from kimi_serve.verify import parse_target
    from kimi_serve.verify.listeners import check_listeners

    port = urlsplit(parse_target(endpoint).base_url).port
    if port is None:
        return None, []
    listeners, findings = check_listeners(port)
    return (None if findings[0].status == SKIP else listeners), findings


def health_phase(endpoint: str) -> str:
    """/health of ``endpoint`` (HOST:PORT) now: ready, refused, warming, ... (one poll, bounded)."""
    from kimi_serve.verify import parse_target, wait_ready

    readiness = wait_ready(parse_target(endpoint), time.monotonic(), poll_timeout=HEALTH_TIMEOUT)
    return readiness.phase


def _monitor_rows(st: Status) -> list[tuple[str, str]]:
    t, m = st.timer, st.monitor
    live = t is not None and "ActiveState" in t
    state = f" {t['ActiveState']}, next run {t.get('NextElapseUSecRealtime') or '-'}" if t and live else ""
    rows = [("monitor", "not installed" if t is None else f"{t['unit']}{state}")]
    if st.traffic is not None:
        rows.append(("traffic", _traffic_row(st.traffic)))
    if m is None:
        return [*rows, ("checks", "none recorded")]
    if m["broken_since"]:
        held = f"last held {m['contract_held_last']}" if m["contract_held_last"] else "not held in the kept history"
        rows.append(("contract", f"BROKEN since {m['broken_since']} ({m['broken_for_s']:.0f}s), {held}"))
    else:
        rows.append(("contract", f"holds (last check {m['contract_held_last']})"))
    rows += [
        ("check", f"{r.get('status')} at {r.get('time')} ({r.get('elapsed_s')}s): {str(r.get('detail'))[:160]}")
        for r in m["last"][-5:]
    ]
    return rows


def _traffic_row(tr: dict[str, Any]) -> str:
    """The real-traffic counters (service/traffic.py): parse failures by kind, and why the journal was not read."""
    counts = ", ".join(f"{k} {n}" for k, n in tr["counts"].items() if n) or "none"
    row = f"parse failures {tr['total']} ({counts}) in {tr['lines_read']} log lines"
    if tr["capped_runs"]:
        row += f", {tr['capped_runs']} runs capped"
    return row + (f"; journal not read: {tr['error']}" if tr["error"] else "")
