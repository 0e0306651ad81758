"""The rolling restart of a replicated deployment SIGKILLed at every checkpoint, then run again (the fault hook,
kimi_serve/core/faults.py): wherever it dies, the router never lost its last healthy worker, every member's unit is its
old text or its new one, a member caught part-way is named INTERRUPTED by `status`, and the next restart rolls it back
first and ends where an uninterrupted roll ends: every file byte for byte, and each replica in the router's rotation
exactly once (one taken out and killed before it was put back is put back).

Driven by tests/rolling_driver.py (what `restart` runs, with a stand-in systemctl and a scripted verifier) against
the test's STAND-IN router (tests/router_stand_in.py), which outlives each killed run as a real router would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from host_files import every_kill_point, files_of, normalized
from router_stand_in import StandInRouter, serving
from zygote import shared

from kimi_serve.service.fleet_status import fleet_status
from kimi_serve.service.systemctl import Systemd, run

# the stand-in router binds a loopback socket; the members' units are checked by the real systemd-analyze
pytestmark = pytest.mark.usefixtures("loopback_port", "systemd_tools")
KEY = "sk-crash-test"


@pytest.fixture(autouse=True)
def _no_sglang_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)


DRIVER = Path(__file__).with_name("rolling_driver.py")
R0, R1 = "http://127.0.0.1:31010", "http://127.0.0.1:31011"
UNITS = ("fleet-r0.service", "fleet-r1.service", "fleet-router.service")


def drive(root: Path, profile: Path, op: str, hook: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_TEST_HOOK"}
    if hook:
        env["KIMI_SERVE_TEST_HOOK"] = hook
    return shared().run([str(root), str(profile), op], env=env, script=str(DRIVER))


def _both_in_rotation(router: StandInRouter) -> None:
    """What a router serving both replicas shows (fresh worker ids, as after a router restart)."""
    router.workers = {str(uuid.uuid4()): R0, str(uuid.uuid4()): R1}
    router.healthy = {R0, R1}
    router.log, router.min_healthy = [], None


def _units(root: Path) -> dict[str, bytes]:
    return {u: (root / "etc/systemd/system" / u).read_bytes() for u in UNITS}


@pytest.mark.usefixtures("kill_points")
def test_a_rolling_restart_killed_at_every_checkpoint_is_rolled_back_then_finished(
    tmp_path: Path, write_profile: Callable[..., Path]
) -> None:
    with serving() as router:
        text = (
            f"extends: sim-dp2\nserver:\n  port: 31010\nrouter:\n  port: {router.port}\nservice:\n  user: root\n"
            "  unit_name: fleet\nmonitor:\n  enabled: false\n"
        )
        old = write_profile(text, name="v1")
        new = write_profile(text + "env:\n  KIMI_TEST_ROLL: '2'\n", name="v2")
        seed = tmp_path / "seed"
        seed.mkdir()
        assert drive(seed, old, "install").stdout.strip() == "0"
        before, old_units = normalized(files_of(seed)), _units(seed)
        ref = tmp_path / "ref"
        shutil.copytree(seed, ref, symlinks=True)
        _both_in_rotation(router)
        assert drive(ref, new, "restart").stdout.strip() == "0"
        reference, new_units = normalized(files_of(ref)), _units(ref)
        assert reference != before and new_units["fleet-r0.service"] != old_units["fleet-r0.service"]
        assert sorted(router.workers.values()) == [R0, R1] and router.min_healthy == 1

        interrupted: list[int] = []

        def killed(n: int, hook: str) -> subprocess.CompletedProcess[str]:
            root = tmp_path / f"k{n}"
            shutil.copytree(seed, root, symlinks=True)
            _both_in_rotation(router)
            return drive(root, new, "restart", hook=hook)

        def after_kill(n: int, _r: subprocess.CompletedProcess[str]) -> None:
            root = tmp_path / f"k{n}"
            assert router.min_healthy in (None, 1), (n, router.log)  # never left without a healthy worker
            units = _units(root)
            for unit in UNITS:
                assert units[unit] in (old_units[unit], new_units[unit]), (n, unit)
            st = fleet_status(root, "fleet.service", Systemd(run, root))  # files and records only
            members = list(st.members.values())
            journals = {p.name for p in (root / "var/lib/kimi-serve/service").glob(".*.intent.json")}
            assert {m.unit for m in members if m.interrupted} == {
                f"{j.removeprefix('.').removesuffix('.intent.json')}.service" for j in journals
            }, n
            assert len(journals) <= 1, (n, journals)  # one replica at a time
            interrupted.extend([n] if journals else [])
            if journals:
                assert any(label == "INTERRUPTED" for label, _ in st.rows()), n
            # the next restart rolls the killed change back first, then ends where an uninterrupted roll ends
            assert drive(root, new, "restart").stdout.strip() == "0", n
            assert normalized(files_of(root)) == reference, n
            assert not list(root.rglob("*.tmp")), n  # a killed write's temp file is swept by the next run
            assert sorted(router.workers.values()) == [R0, R1], (n, router.log)
            shutil.rmtree(root)

        kills, last = every_kill_point(killed, after_kill)
        assert last.stdout.strip() == "0", last.stderr
        assert normalized(files_of(tmp_path / f"k{kills + 1}")) == reference
    assert kills > 9, f"only {kills} checkpoints in the rolling restart"
    assert len(interrupted) > 4, interrupted
