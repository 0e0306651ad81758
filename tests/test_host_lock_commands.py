"""Locks per resource (kimi_serve.core.lock): a command waits only for one that holds what it changes or takes.

The state of a root (the host lock for ``/``, a scratch ``--root``'s own), the engine venv being patched or
installed, the GPUs and ports `up` takes. While another process holds one, the commands that need it exit 75 naming
the holder and the resource (and change nothing), or wait with --wait-lock; the others run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_serve.check.launch import plan_deployment, validated_launch
from kimi_serve.core.lock import resource_lock_path, root_lock_path
from kimi_serve.profile.loader import load_profile
from kimi_serve.up.locks import gpus_of, ports_of

HOLDER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from kimi_serve.core import lock\n"
    "kind, arg, command, seconds = sys.argv[1:5]\n"
    "cm = {\n"
    "    'host': lambda: lock.host_lock(command),\n"
    "    'root': lambda: lock.root_lock(command, Path(arg)),\n"
    "    'gpu': lambda: lock.resource_lock(command, 'gpu', arg),\n"
    "    'port': lambda: lock.resource_lock(command, 'port', arg),\n"
    "    'serve-from': lambda: lock.directory_lock(Path(arg), shared=True),\n"
    "}[kind]()\n"
    "with cm:\n"
    "    print('held', flush=True)\n"
    "    time.sleep(float(seconds))\n"
)


def hold(kind: str, arg: str, command: str = "patches apply", seconds: float = 60) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, kind, arg, command, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_restart_exits_75_naming_the_holder_of_the_host_lock(cli, holders, monkeypatch: pytest.MonkeyPatch) -> None:
    # STAND-IN: a running systemd (this host has none: restart would refuse with 5 first, tests/test_no_systemd.py)
    monkeypatch.setattr("kimi_serve.service.systemctl.Systemd.unreachable", lambda self: None)
    holders.append(holder := hold("host", "", "patches apply"))
    r = cli("restart", "--profile", "sim")
    assert r.code == 75, (r.out, r.err)
    assert f"`kimi-serve patches apply` (pid {holder.pid}, since " in r.err and "is changing this host" in r.err
    assert r.err.count("\n") == 1 and "--wait-lock" in r.err


@pytest.mark.parametrize(
    "argv",
    [("install-service", "--profile", "sim", "--root", "{root}"), ("uninstall-service", "--root", "{root}")],
    ids=lambda a: a[0],
)
def test_a_scratch_root_has_its_own_lock(cli, holders, tmp_path: Path, argv: tuple[str, ...]) -> None:
    """Held: 75 naming the holder and the root, nothing read or written. The host lock held by an
    `up` (or anything else) does not stop an offline install into a scratch root."""
    root = tmp_path / "root"
    root.mkdir()
    holders.append(holder := hold("root", str(root), "install-service"))
    r = cli(*(a.replace("{root}", str(root)) for a in argv))
    assert r.code == 75, (r.out, r.err)
    assert f"`kimi-serve install-service` (pid {holder.pid}, since " in r.err and f"is changing {root}" in r.err
    assert r.err.count("\n") == 1 and "--wait-lock" in r.err
    assert list(root.iterdir()) == []  # nothing was read into a plan, nothing written
    assert root_lock_path(root) != root_lock_path(tmp_path) and not root_lock_path(root).is_relative_to(root)


def test_the_host_lock_does_not_stop_a_scratch_root(cli, holders, tmp_path: Path) -> None:
    holders.append(hold("host", "", "up"))
    r = cli("uninstall-service", "--root", str(tmp_path))
    assert r.code == 0 and "not installed" in r.out, r.err


def test_wait_lock_waits_for_the_holder(cli, tmp_path: Path) -> None:
    proc = hold("root", str(tmp_path), "restart", 2.0)
    try:
        started = time.monotonic()
        r = cli("uninstall-service", "--root", str(tmp_path), "--wait-lock")
        assert r.code == 0 and "not installed" in r.out, r.err
        assert time.monotonic() - started >= 1.0  # it waited for the holder to let go
    finally:
        proc.wait()


def test_up_takes_its_port_not_the_host_lock_and_the_simulator_no_gpu(cli, holders) -> None:
    """`up --profile sim` while the host lock and GPU 0 are held: refused only for its port (taken after the GPUs,
    so a GPU lock would have been named first), before the preflight."""
    holders.append(hold("host", "", "patches apply"))
    holders.append(hold("gpu", "0", "up"))
    holders.append(holder := hold("port", "30000", "up"))
    r = cli("up", "--profile", "sim")
    assert r.code == 75, (r.out, r.err)
    assert f"`kimi-serve up` (pid {holder.pid}, since " in r.err and "holds port 30000" in r.err
    assert "preflight" not in r.out + r.err and r.err.count("\n") == 1
    assert str(resource_lock_path("port", "30000")) in r.err


def test_the_resources_up_takes() -> None:
    sim = load_profile("sim")
    assert gpus_of(sim, validated_launch(sim), {}) == [] and ports_of(plan_deployment(sim)) == [30000]
    dp2 = load_profile("sim-dp2")
    assert ports_of(plan_deployment(dp2)) == sorted({dp2.router.port, dp2.server.port, dp2.server.port + 1})
    prod = load_profile("prod")
    launch = validated_launch(prod)
    assert gpus_of(prod, launch, {}) == [str(i) for i in range(prod.gpus)]
    assert gpus_of(prod, launch, {"CUDA_VISIBLE_DEVICES": "5,4, 10"}) == ["4", "5", "10"]
