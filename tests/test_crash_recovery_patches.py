"""Crash at any point, recover on the next run: `patches apply` and `patches revert` are SIGKILLed at every one of
their checkpoints (the test hook of kimi_serve.core.faults), against scratch copies of the real SGLang 0.5.23 files.
After each kill, `patches status` must tell the truth, and the next apply / revert must end byte for byte where an
uninterrupted run ends. Also: two `patches apply` started together (the lock of the site-packages)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from host_files import every_kill_point
from patches_support import extract, pinned_wheel, snapshot
from zygote import shared

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.patches import apply, load_patch_set, revert, status
from kimi_serve.patches import change as patch_change

SET = "sglang-0.5.23-sm120"
# tests/conftest.py: the module fixtures (the patch set, a pristine copy: 0.2 s) are rebuilt on each worker rather
# than holding one worker for the module's 90 s
SPREAD_ACROSS_WORKERS = True


@pytest.fixture(scope="module")
def patch_set():
    return load_patch_set(SET)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, patch_set) -> Path:
    return extract(pinned_wheel(patch_set), tmp_path_factory.mktemp("pristine") / "site-packages", whole_package=False)


def kimi(*args: str, hook: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("KIMI_SERVE_TEST_HOOK", None)
    if hook:
        env["KIMI_SERVE_TEST_HOOK"] = hook
    return shared().run(list(args), env=env)


def patches(
    verb: str, site: Path, state: Path, *extra: str, hook: str | None = None
) -> subprocess.CompletedProcess[str]:
    return kimi("patches", verb, "--site-packages", str(site), "--state-dir", str(state), *extra, hook=hook)


def assert_status_tells_the_truth(site: Path, state: Path, patch_set, *, original, patched) -> None:
    st = status(site, patch_set, state_dir=state)
    journal = list(state.glob("patches/*/*.intent.json"))
    if journal:  # killed inside the change: status must say so (and exit 1)
        assert st.interrupted is not None and st.interrupted["op"] in ("apply", "revert")
        r = patches("status", site, state)
        assert r.returncode == 1 and "INTERRUPTED: an interrupted `patches" in r.stdout, r.stdout
        return
    assert st.interrupted is None
    now = snapshot(site)
    # no journal: the install must be exactly one of the two states, and the record must agree with it
    assert now in (original, patched), "files changed outside a journalled change"
    if now == patched:
        assert st.all_applied and st.record is not None and "applied_at" in st.record
    else:
        assert st.pristine and st.record is None


@pytest.mark.usefixtures("kill_points")
@pytest.mark.parametrize("verb", ["apply", "revert"])
def test_kill_at_every_checkpoint_then_recover(verb: str, pristine: Path, patch_set, tmp_path: Path) -> None:
    original = snapshot(pristine)
    ref_site, ref_state = tmp_path / "ref" / "site-packages", tmp_path / "ref" / "state"
    shutil.copytree(pristine, ref_site)
    apply(ref_site, patch_set, state_dir=ref_state)
    patched = snapshot(ref_site)
    assert patched != original

    def where(n: int) -> tuple[Path, Path]:
        return tmp_path / f"k{n}" / "site-packages", tmp_path / f"k{n}" / "state"

    def killed(n: int, hook: str) -> subprocess.CompletedProcess[str]:
        site, state = where(n)
        shutil.copytree(pristine, site)
        if verb == "revert":
            apply(site, patch_set, state_dir=state)
        return patches(verb, site, state, hook=hook)

    def after_kill(n: int, _r: subprocess.CompletedProcess[str]) -> None:
        site, state = where(n)
        assert_status_tells_the_truth(site, state, patch_set, original=original, patched=patched)
        # the next run of the same command finishes the job...
        done = (apply if verb == "apply" else revert)(site, patch_set, state_dir=state)
        assert snapshot(site) == (patched if verb == "apply" else original), (n, done.message)
        assert not list(state.glob("patches/*/*.intent.json"))
        # ... and the opposite command then works from there, byte for byte
        (revert if verb == "apply" else apply)(site, patch_set, state_dir=state)
        assert snapshot(site) == (original if verb == "apply" else patched), n
        shutil.rmtree(site.parent)

    kills, last = every_kill_point(killed, after_kill)  # past the last checkpoint: the run completed
    assert last.returncode == 0, last.stderr
    assert snapshot(where(kills + 1)[0]) == (patched if verb == "apply" else original)
    assert kills >= 10, f"only {kills} checkpoints in `patches {verb}`"


def test_next_revert_after_a_killed_apply_restores_the_originals(pristine: Path, patch_set, tmp_path: Path) -> None:
    original = snapshot(pristine)
    site, state = tmp_path / "site-packages", tmp_path / "state"
    shutil.copytree(pristine, site)
    trace = tmp_path / "trace"
    patches("apply", site, state, hook=f"trace-to={trace}")
    swaps = [int(line.split()[0]) for line in trace.read_text().splitlines() if "swap.replace" in line]
    shutil.rmtree(site)
    shutil.rmtree(state)
    shutil.copytree(pristine, site)
    r = patches("apply", site, state, hook=f"kill-at={swaps[1] + 1}")  # one file swapped in, the others not
    assert r.returncode == -signal.SIGKILL
    assert snapshot(site) != original
    r = patches("revert", site, state)
    assert r.returncode == 0, r.stderr
    assert "rolled back an interrupted `patches apply`" in r.stdout
    assert snapshot(site) == original


def test_revert_checks_the_restored_files_against_the_manifest(
    pristine: Path, patch_set, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, state = tmp_path / "site-packages", tmp_path / "state"
    shutil.copytree(pristine, site)
    apply(site, patch_set, state_dir=state)
    real = patch_change.replace_all
    victim = patch_set.files[0].path

    def replace_then_disk_corrupts(root: Path, contents) -> None:  # the bytes on disk are not what was written
        real(root, contents)
        with open(root / victim, "ab") as f:
            f.write(b"\n# bit rot\n")

    monkeypatch.setattr(patch_change, "replace_all", replace_then_disk_corrupts)
    with pytest.raises(KimiServeError) as err:
        revert(site, patch_set, state_dir=state)
    assert err.value.exit_code == ExitCode.FAILED
    assert victim in err.value.message and "not the original's" in err.value.message


def test_two_applies_started_together_one_applies_the_other_exits_75(pristine: Path, tmp_path: Path) -> None:
    site, state = tmp_path / "site-packages", tmp_path / "state"
    shutil.copytree(pristine, site)
    hook = "pause-at=patches.apply.start:2"  # the holder pauses inside its change: the runs surely overlap
    argv = [
        sys.executable,
        "-m",
        "kimi_serve",
        "patches",
        "apply",
        "--site-packages",
        str(site),
        "--state-dir",
        str(state),
    ]
    env = {**os.environ, "KIMI_SERVE_TEST_HOOK": hook}
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _, _ in results)
    assert codes == [0, 75], results
    winner = next(out for rc, out, _ in results if rc == 0)
    loser = next(err for rc, _, err in results if rc == 75)
    assert "applied 7 patches" in winner
    assert "patches apply" in loser and f"is changing the SGLang in {site.resolve()}" in loser
    assert "--wait-lock" in loser and loser.count("\n") == 1


def test_with_wait_lock_the_second_apply_waits_and_finds_it_applied(pristine: Path, tmp_path: Path) -> None:
    site, state = tmp_path / "site-packages", tmp_path / "state"
    shutil.copytree(pristine, site)
    argv = [
        sys.executable,
        "-m",
        "kimi_serve",
        "patches",
        "apply",
        "--site-packages",
        str(site),
        "--state-dir",
        str(state),
        "--wait-lock",
        "--json",
    ]
    env = {**os.environ, "KIMI_SERVE_TEST_HOOK": "pause-at=patches.apply.start:2"}
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert [rc for rc, _, _ in results] == [0, 0], results
    messages = sorted(json.loads(out)["message"] for _, out, _ in results)
    assert messages[0].endswith("already applied, nothing to do")
    assert "applied 7 patches" in messages[1]


@pytest.mark.usefixtures("kill_points")
def test_a_recovery_killed_at_every_checkpoint_is_recovered_again(pristine: Path, patch_set, tmp_path: Path) -> None:
    original = snapshot(pristine)
    site, state = tmp_path / "site-packages", tmp_path / "state"  # the journal is kept per site-packages path
    shutil.copytree(pristine, site)
    trace = tmp_path / "trace"
    patches("apply", site, state, hook=f"trace-to={trace}")
    swaps = [int(line.split()[0]) for line in trace.read_text().splitlines() if "swap.replace" in line]

    def killed(m: int, hook: str) -> subprocess.CompletedProcess[str]:
        shutil.rmtree(site)
        shutil.rmtree(state)
        shutil.copytree(pristine, site)
        assert patches("apply", site, state, hook=f"kill-at={swaps[2] + 1}").returncode == -signal.SIGKILL
        return patches("revert", site, state, hook=hook)

    def after_kill(m: int, _r: subprocess.CompletedProcess[str]) -> None:
        assert patches("revert", site, state).returncode == 0, m
        assert snapshot(site) == original, m
        assert not list(state.glob("patches/*/*.intent.json"))

    # the `patches revert` that recovers from a killed apply is itself killed at each of its checkpoints
    kills, last = every_kill_point(killed, after_kill)
    assert last.returncode == 0, last.stderr
    assert snapshot(site) == original
    assert kills > 2
