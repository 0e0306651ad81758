"""One change at a time: every command that changes the host takes the host lock before it reads any state, so while
another process holds it they exit 75 naming the holder (and change nothing), or wait with --wait-lock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HOLDER = (
    "import sys, time\n"
    "from kimi_serve.core.lock import host_lock\n"
    "with host_lock(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(float(sys.argv[2]))\n"
)


def hold(command: str, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, command, str(seconds)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    proc = hold("patches apply", 60)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize(
    "argv",
    [
        ("up", "--profile", "sim"),
        ("install-service", "--profile", "sim", "--root", "{root}"),
        ("uninstall-service", "--root", "{root}"),
        ("restart", "--profile", "sim"),
    ],
    ids=lambda a: a[0],
)
def test_host_changing_commands_exit_75_naming_the_holder(
    cli, holder: subprocess.Popen[str], tmp_path: Path, argv: tuple[str, ...]
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    r = cli(*(a.replace("{root}", str(root)) for a in argv))
    assert r.code == 75, (r.out, r.err)
    assert f"`kimi-serve patches apply` (pid {holder.pid}, since " in r.err and "is changing this host" in r.err
    assert r.err.count("\n") == 1 and "--wait-lock" in r.err
    assert list(root.iterdir()) == []  # nothing was read into a plan, nothing written


def test_wait_lock_waits_for_the_holder(cli, tmp_path: Path) -> None:
    proc = hold("restart", 2.0)
    try:
        started = time.monotonic()
        r = cli("uninstall-service", "--root", str(tmp_path), "--wait-lock")
        assert r.code == 0 and "not installed" in r.out, r.err
        assert time.monotonic() - started >= 1.0  # it waited for the holder to let go
    finally:
        proc.wait()
