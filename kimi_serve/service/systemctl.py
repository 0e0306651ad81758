"""systemctl and systemd-analyze, run through the subprocess chokepoint (:mod:`kimi_serve.core.proc`).

Every command goes through a :class:`Runner` (``run(argv, timeout=) -> Completed``): argv lists only, no shell. The
real runner is :func:`run`; pure-logic tests pass a recording runner instead. :class:`Systemd` knows the commands and
what ``--root`` means: with a root other than ``/``, systemd is not running there, so only offline operations
(``enable``/``disable``/``is-enabled`` with ``--root=DIR``, ``systemd-analyze verify``) are possible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core import proc
from kimi_serve.core.proc import Completed, Runner

SYSTEMCTL_TIMEOUT = 90.0  # daemon-reload, enable, stop of a quick unit


_SYSTEMD_TOOLS, _HINT = ("systemctl", "systemd-analyze", "journalctl"), "install systemd (apt-get install systemd)"


def run(argv: Sequence[str], *, timeout: float) -> Completed:
    """The one place kimi-serve's service code starts a process (:func:`kimi_serve.core.proc.run`)."""
    return proc.run(argv, timeout=timeout, install_hint=_HINT if argv[0] in _SYSTEMD_TOOLS else None)


@dataclass(frozen=True)
class Systemd:
    runner: Runner
    root: Path  # "/" for the running system
    offline: bool = False  # "/" whose systemd is not running: only offline (--root=/) operations, as for a root

    @property
    def live(self) -> bool:
        """True when ``root`` is the running system (daemon-reload, restart, show make sense)."""
        return self.root == Path("/") and not self.offline

    def _systemctl(self, *args: str, timeout: float = SYSTEMCTL_TIMEOUT) -> Completed:
        root = [] if self.live else [f"--root={self.root}"]
        return self.runner(["systemctl", *root, *args], timeout=timeout)

    def unreachable(self) -> str | None:
        """Why systemd cannot be driven here (PID 1 is not systemd, its bus is down: a container, a chroot, WSL), as
        systemctl says it in one line; None when it answers, or for an offline --root (nothing to reach)."""
        if self.root != Path("/"):
            return None
        done = self.runner(["systemctl", "show", "--property=Version"], timeout=30)
        if done.ok:
            return None
        lines = [line.strip() for line in (done.err or done.out).splitlines() if line.strip()]
        return " ".join(lines)[:300] or f"systemctl exited {done.rc}"

    def daemon_reload(self) -> Completed:
        return self._systemctl("daemon-reload")

    def enable(self, unit: str) -> Completed:
        return self._systemctl("enable", unit)

    def disable(self, unit: str) -> Completed:
        return self._systemctl("disable", unit)

    def restart(self, unit: str, timeout: float) -> Completed:
        """Blocks until the start job finishes: ExecStartPost (the contract check) included."""
        return self._systemctl("restart", unit, timeout=timeout)

    def stop(self, unit: str, timeout: float) -> Completed:
        return self._systemctl("stop", unit, timeout=timeout)

    def reset_failed(self, unit: str) -> Completed:
        return self._systemctl("reset-failed", unit)

    def journal_tail(self, unit: str) -> str:
        """The unit's last 6 journal lines joined on one line ('' when journalctl has nothing or fails)."""
        done = self.runner(["journalctl", "--no-pager", "-o", "cat", "-n", "6", "-u", unit], timeout=SYSTEMCTL_TIMEOUT)
        return " / ".join(line.strip() for line in done.out.splitlines() if line.strip()) if done.ok else ""

    def show(self, unit: str, props: Sequence[str]) -> dict[str, str] | Completed:
        """The unit's properties, or the failed :class:`Completed` (e.g. systemd is not running here)."""
        done = self._systemctl("show", unit, "--property=" + ",".join(props))
        if not done.ok:
            return done
        return dict(line.split("=", 1) for line in done.out.splitlines() if "=" in line)
