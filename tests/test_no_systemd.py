"""A host whose systemd is not running (a container, a chroot, WSL): install-service and restart refuse before
anything is written (exit 5, one line), `--dry-run` lists it as a failing host check, and uninstall-service still
removes what kimi-serve wrote. systemctl here is a STAND-IN on $PATH that answers as systemctl does on such a host
(its two lines, exit 1) and logs every call, so the tests can tell that nothing was attempted."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.proc import Completed
from kimi_serve.service.preflight import host_step, require_systemd
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.uninstall import uninstall

pytestmark = pytest.mark.usefixtures("systemd_tools")

NO_SYSTEMD = (
    "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
    "Failed to connect to bus: Host is down\n"
)


@pytest.fixture(autouse=True)
def _no_sglang_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)


@pytest.fixture
def stand_in_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """STAND-IN: `systemctl` first on $PATH, answering as on a host without a running systemd; returns its log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "systemctl.log"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nprintf %s "{NO_SYSTEMD}" >&2\nexit 1\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


class Recorder:
    """A systemctl runner for the uninstall: `show` fails as on a host without systemd, everything else is recorded."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed:
        self.calls.append(list(argv))
        if argv[:2] == ["systemctl", "show"]:
            return Completed(tuple(argv), 1, "", NO_SYSTEMD)
        return Completed(tuple(argv), 0, "", "")


@pytest.mark.parametrize("command", ["install-service", "restart"])
def test_install_and_restart_refuse_before_writing(
    cli: Callable[..., object], stand_in_systemctl: Path, tmp_path: Path, command: str
) -> None:
    state = Path(os.environ["KIMI_SERVE_STATE_DIR"])
    before = sorted(state.rglob("*")) if state.exists() else []
    r = cli(command, "--profile", "sim")
    assert r.code == ExitCode.ENVIRONMENT, r.err  # type: ignore[attr-defined]
    lines = r.err.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and "systemd is not running here, nothing was changed" in lines[0], r.err  # type: ignore[attr-defined]
    assert "Host is down" in lines[0] and "--root DIR" in lines[0]  # systemctl's reason and the fix
    # systemd was asked once whether it runs, and nothing else was attempted; no lock, record or journal was made
    assert stand_in_systemctl.read_text().split("\n")[:-1] == ["show --property=Version"]
    assert (sorted(state.rglob("*")) if state.exists() else []) == before


def test_dry_run_lists_it_as_a_failing_host_check() -> None:
    found: list[Finding] = []
    host_step(True, found, lambda: require_systemd(Systemd(Recorder(), Path("/"))), None)
    assert [(f.layer, f.status, f.where) for f in found] == [("host", FAIL, "systemd")]
    assert "systemd is not running here" in found[0].message and "--root DIR" in found[0].fix
    with pytest.raises(KimiServeError) as exc:  # not a preview: the refusal itself, exit 5
        require_systemd(Systemd(Recorder(), Path("/")))
    assert exc.value.exit_code == ExitCode.ENVIRONMENT


def test_an_offline_root_never_asks_systemd(tmp_path: Path) -> None:
    runner = Recorder()
    require_systemd(Systemd(runner, tmp_path))  # --root DIR: nothing runs there, nothing to reach
    assert runner.calls == []


def test_uninstall_removes_what_it_wrote_without_systemd(
    cli: Callable[..., object], root: Path, write_profile: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIMI_SERVE_API_KEY", "sk-no-systemd-test")
    profile = write_profile("extends: sim\nserver:\n  api_key_file: /etc/kimi-serve/nosd-secrets.yaml\n", name="nosd")
    r = cli("install-service", "--profile", str(profile), "--root", str(root))  # an offline install: the files
    assert r.code == 0, r.err  # type: ignore[attr-defined]
    paths = ServicePaths(root, "sglang-kimi.service")
    assert paths.unit_file.exists() and paths.state_dir.exists()
    runner = Recorder()
    result = uninstall(paths, Systemd(runner, Path("/")), dry_run=False)
    assert result.exit_code == ExitCode.OK, result.to_json()
    assert not paths.unit_file.exists() and not paths.state_dir.exists()
    skipped = [s for s in result.steps if s.status == "skipped"]
    assert (
        len(skipped) == 1 and "systemd is not running here" in skipped[0].detail and "Host is down" in skipped[0].detail
    )
    verbs = [c for c in runner.calls if c[:2] != ["systemctl", "show"]]
    assert verbs and all(c[1] == "--root=/" for c in verbs), verbs  # links edited offline, nothing stopped
    assert not any("stop" in c or "daemon-reload" in c for c in verbs), verbs
