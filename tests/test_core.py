"""core: an internal error is reported as a kimi-serve bug (exit 70), never as a verdict on the server; the host lock
lets one change run at a time and names its holder (exit 75)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kimi_serve.core.errors import ExitCode, KimiServeError, LockHeld
from kimi_serve.core.lock import host_lock, lock_path


def test_an_unexpected_exception_is_an_internal_error_not_a_failed_contract(cli, monkeypatch, tmp_path):
    import kimi_serve.profile.loader as loader

    def broken(_ref: str, *_sets: object):
        raise ZeroDivisionError("injected fault")

    monkeypatch.setattr(loader, "load_profile", broken)
    res = cli("show", "--profile", "prod")
    assert res.code == ExitCode.INTERNAL == 70
    line = res.err.strip().splitlines()[-1]
    assert line.startswith("kimi-serve: internal error: ZeroDivisionError: injected fault")
    assert "a bug in kimi-serve" in line and "Traceback" not in res.err
    saved = Path(line.split("traceback: ")[1].split(";")[0])
    assert saved.is_file() and "ZeroDivisionError: injected fault" in saved.read_text()
    assert saved.is_relative_to(Path(os.environ["KIMI_SERVE_STATE_DIR"]))


def test_debug_prints_the_traceback_of_an_internal_error(cli, monkeypatch):
    import kimi_serve.profile.loader as loader

    monkeypatch.setattr(loader, "load_profile", lambda _ref: 1 / 0)
    res = cli("--debug", "show", "--profile", "prod")
    assert res.code == 70 and "Traceback" in res.err


def test_the_host_lock_is_exclusive_across_processes_and_names_its_holder(tmp_path):
    holder = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from kimi_serve.core.lock import host_lock
        with host_lock("patches apply", state_dir=Path({str(tmp_path)!r})):
            print("held", flush=True)
            time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(KimiServeError) as err, host_lock("install-service", state_dir=tmp_path):
            pass
        assert err.value.exit_code == ExitCode.LOCKED
        assert f"`kimi-serve patches apply` (pid {proc.pid}" in err.value.message
        # the core names no option (the CLI adds --wait-lock for a command that has it: tests/test_lock_hints.py)
        assert isinstance(err.value, LockHeld) and err.value.hint == "wait for it to finish, then run it again"
        proc.kill()  # SIGKILL: the kernel drops the lock, nothing stale is left behind
        proc.wait(10)
        with host_lock("install-service", state_dir=tmp_path, wait=True, wait_timeout=10):
            assert '"install-service"' in lock_path(tmp_path).read_text()
    finally:
        proc.kill()
        proc.wait(10)


def test_the_host_lock_is_reentrant_in_one_process(tmp_path):
    with host_lock("restart", state_dir=tmp_path), host_lock("install-service", state_dir=tmp_path):
        pass
    with host_lock("restart", state_dir=tmp_path):  # released: can be taken again
        pass
