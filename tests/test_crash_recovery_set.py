"""`install-service --set service.unit_name=foo`, SIGKILLed at each of its checkpoints: the next run with the same
``--set`` rolls foo's half-made change back first (it never adopts the key file the killed run created), `status` with
the same ``--set`` reports foo's interruption, and the run then ends exactly where an uninterrupted one ends.

The killed runs are independent (each its own root and state directory), so they run side by side; the checks after
them run in this process, one root at a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from host_files import files_of
from zygote import shared

from kimi_serve.service.journal import intent_path
from kimi_serve.service.state import ServicePaths

# The killed run and the next one use different keys: a key file the killed run created and the next run adopted
# (instead of rolling it back and creating its own) shows as the killed run's key in the end state.
KILLED_KEY, KEY = "sk-killed-run", "sk-next-run"
SET = ("--set", "service.unit_name=foo")
UNIT = "foo.service"

pytestmark = pytest.mark.usefixtures("systemd_tools")


@pytest.fixture(autouse=True)
def _no_sglang_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)


def _install(profile: Path, root: Path, key: str, state: Path, hook: str) -> subprocess.CompletedProcess[str]:
    root.mkdir()
    env = {**os.environ, "KIMI_SERVE_API_KEY": key, "KIMI_SERVE_STATE_DIR": str(state), "KIMI_SERVE_TEST_HOOK": hook}
    return shared().run(["install-service", "-p", str(profile), "--root", str(root), "--replace", *SET], env=env)


@pytest.mark.usefixtures("kill_points")
def test_a_set_renamed_install_killed_at_every_checkpoint_is_rolled_back_by_the_next_run(
    tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    profile = write_profile("extends: sim\nserver:\n  api_key_file: /etc/kimi-serve/crash.yaml\n", name="renamed")
    trace = tmp_path / "trace"
    done = _install(profile, tmp_path / "ref", KEY, tmp_path / "state-ref", f"trace-to={trace}")
    assert done.returncode == 0, done.stderr
    reference = files_of(tmp_path / "ref")
    assert f"etc/systemd/system/{UNIT}" in reference and "etc/systemd/system/sglang-kimi.service" not in reference
    points = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    assert len(points) >= 5, points

    def killed(n: int) -> subprocess.CompletedProcess[str]:
        return _install(profile, tmp_path / f"k{n}", KILLED_KEY, tmp_path / f"state-{n}", f"kill-at={n}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(killed, range(1, len(points) + 1)))
    assert [r.returncode for r in runs] == [-signal.SIGKILL] * len(points), [r.stderr for r in runs]

    for n, point in enumerate(points, 1):
        root = tmp_path / f"k{n}"
        # every checkpoint but the first (the journal's own write, before its rename) is inside the change
        begun = point != "service.journal.write"
        assert intent_path(ServicePaths(root.resolve(), UNIT)).exists() == begun, point
        st = cli("status", "-p", str(profile), *SET, "--root", str(root), "--json")
        data = json.loads(st.out)
        assert data["unit"] == UNIT and (data["interrupted"] or {}).get("op") == ("install-service" if begun else None)
        assert st.code == 1, (point, data)
        again = cli("install-service", "-p", str(profile), "--root", str(root), "--replace", *SET)
        assert again.code == 0, (point, again.err)
        assert begun == ("rolled back an interrupted `kimi-serve install-service`" in again.err), (point, again.err)
        assert files_of(root) == reference, point
        assert KEY in (root / "etc/kimi-serve/crash.yaml").read_text()
        assert not intent_path(ServicePaths(root.resolve(), UNIT)).exists()
