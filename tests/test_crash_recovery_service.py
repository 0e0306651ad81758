"""Crash at any point, recover on the next run: `install-service` (under an injected --root, with the real
systemd-analyze and `systemctl --root`) is SIGKILLed at every one of its checkpoints (the test hook of
kimi_serve.core.faults). After each kill `status` must tell the truth, the rollback must give back the files of the
root byte for byte, and the next install-service must end exactly where an uninterrupted one ends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from host_files import every_kill_point, files_of, normalized
from restart_driver import stand_in_systemctl  # STAND-IN for systemctl: every call succeeds
from zygote import shared

from kimi_serve.service.fleet import recover_fleet
from kimi_serve.service.journal import intent_path, recover
from kimi_serve.service.state import UNIT_DIR, ServicePaths
from kimi_serve.service.systemctl import Systemd, run

KEY = "sk-crash-test"
UNIT = "sglang-kimi.service"
FLEET = "extends: sim-dp2\nservice:\n  unit_name: fleet\nserver:\n  api_key_file: /etc/kimi-serve/fleet.yaml\n"

pytestmark = pytest.mark.usefixtures("systemd_tools")


@pytest.fixture(autouse=True)
def _no_sglang_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    monkeypatch.setenv("KIMI_SERVE_API_KEY", KEY)


def install(profile: Path, root: Path, hook: str | None = None, key: bool = True) -> subprocess.CompletedProcess[str]:
    """install-service in the shared zygote; ``key`` False: from a shell without $KIMI_SERVE_API_KEY."""
    env = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_TEST_HOOK" and (key or k != "KIMI_SERVE_API_KEY")}
    if hook:
        env["KIMI_SERVE_TEST_HOOK"] = hook
    return shared().run(["install-service", "-p", str(profile), "--root", str(root), "--replace"], env=env)


def without_temps(files: dict[str, tuple[int, bytes | str]]) -> dict[str, tuple[int, bytes | str]]:
    """A root's files but a killed atomic write's temp file (the next command sweeps it, under the lock)."""
    return {rel: v for rel, v in files.items() if not rel.endswith(".tmp")}


def temp_files(root: Path) -> list[str]:
    """Temporary files of atomic writes (journal, unit, record, key file) anywhere under ``root``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


@pytest.mark.usefixtures("kill_points")
@pytest.mark.parametrize("start", ["fresh", "over-an-installed-unit", "fresh-creating-the-account"])
def test_install_service_killed_at_every_checkpoint_is_rolled_back_then_finished(
    start: str, tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    """``fresh-creating-the-account``: the root has a user database without service.user, so install-service creates
    the account for real (useradd --prefix, as root); a rollback removes it again (userdel), byte for byte."""
    first = write_profile("extends: sim\nserver:\n  api_key_file: /etc/kimi-serve/crash.yaml\n", name="first")
    second = write_profile("extends: first\nserver:\n  port: 30456\n", name="second")
    seed = tmp_path / "seed"
    seed.mkdir()
    if start == "fresh-creating-the-account":
        if os.geteuid() != 0:
            pytest.skip("useradd --prefix needs root (CI runs as root)")
        (seed / "etc").mkdir()
        (seed / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
        (seed / "etc/group").write_text("root:x:0:\nvideo:x:44:\n")
    if start == "over-an-installed-unit":
        assert install(first, seed).returncode == 0
    before = files_of(seed)
    ref = tmp_path / "ref"
    shutil.copytree(seed, ref, symlinks=True)
    assert install(second, ref).returncode == 0
    reference = files_of(ref)
    assert reference != before

    def killed(n: int, hook: str) -> subprocess.CompletedProcess[str]:
        root = tmp_path / f"k{n}"
        shutil.copytree(seed, root, symlinks=True)
        return install(second, root, hook=hook)

    def after_kill(n: int, _r: subprocess.CompletedProcess[str]) -> None:
        root = tmp_path / f"k{n}"
        paths = ServicePaths(root.resolve(), UNIT)
        st = cli("status", "--root", str(root), "--json")
        data = json.loads(st.out)
        if intent_path(paths).exists():  # killed inside the change: status says so, and exits 1
            assert data["interrupted"]["op"] == "install-service" and st.code == 1, (n, data)
        else:  # no journal: nothing was changed yet (but a journal's temp file), or everything was
            assert data["interrupted"] is None
            assert without_temps(files_of(root)) in (before, reference), n
        if n % 2:  # the rollback alone gives back the files byte for byte ...
            recover(paths, Systemd(run, paths.root))
            assert files_of(root) == before, n
        # ... and the next install-service (which rolls back first, itself, on even N) ends where a clean one ends
        again = cli("install-service", "-p", str(second), "--root", str(root), "--replace")
        assert again.code == 0, (n, again.err)
        assert files_of(root) == reference, n
        assert not intent_path(paths).exists()
        shutil.rmtree(root)

    kills, last = every_kill_point(killed, after_kill)
    assert last.returncode == 0, last.stderr
    assert files_of(tmp_path / f"k{kills + 1}") == reference
    assert kills >= 5, f"only {kills} checkpoints in install-service"


def test_a_second_install_while_one_holds_the_lock_exits_75(tmp_path: Path, write_profile: Callable[..., Path]) -> None:
    profile = write_profile("extends: sim\nserver:\n  api_key_file: /etc/kimi-serve/crash.yaml\n", name="lk")
    root = tmp_path / "root"
    root.mkdir()
    env = {**os.environ, "KIMI_SERVE_TEST_HOOK": "pause-at=service.write.start:3"}
    argv = [sys.executable, "-m", "kimi_serve", "install-service", "-p", str(profile), "--root", str(root)]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert sorted(rc for rc, _, _ in results) == [0, 75], results
    loser = next(err for rc, _, err in results if rc == 75)
    assert "`kimi-serve install-service` (pid " in loser and f"is changing {root}" in loser


def restart_driver(
    root: Path, profile: Path, scenario: str, hook: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_TEST_HOOK"}
    if hook:
        env["KIMI_SERVE_TEST_HOOK"] = hook
    return shared().run(
        [str(root), str(profile), scenario], env=env, script=str(Path(__file__).parent / "restart_driver.py")
    )


@pytest.mark.usefixtures("kill_points")
@pytest.mark.parametrize("scenario, code", [("pass", "0"), ("fail", "1")], ids=["new-unit-passes", "rolls-back"])
def test_restart_killed_at_every_checkpoint_is_rolled_back_then_finished(
    scenario: str, code: str, tmp_path: Path, write_profile: Callable[..., Path]
) -> None:
    from kimi_serve.service.status import status

    good = write_profile("extends: sim\nserver:\n  port: 30001\n", name="good")
    new = write_profile("extends: sim\nserver:\n  port: 30002\n", name="new")
    seed = tmp_path / "seed"
    seed.mkdir()
    assert restart_driver(seed, good, "pass").stdout.strip() == "0"  # the last good unit
    before = normalized(files_of(seed))
    ref = tmp_path / "ref"
    shutil.copytree(seed, ref, symlinks=True)
    assert restart_driver(ref, new, scenario).stdout.strip() == code
    reference = normalized(files_of(ref))
    assert reference != before

    def killed(n: int, hook: str) -> subprocess.CompletedProcess[str]:
        root = tmp_path / f"k{n}"
        shutil.copytree(seed, root, symlinks=True)
        return restart_driver(root, new, scenario, hook=hook)

    def after_kill(n: int, _r: subprocess.CompletedProcess[str]) -> None:
        root = tmp_path / f"k{n}"
        paths = ServicePaths(root, UNIT)
        st = status(paths, Systemd(run, root))  # an injected root: files and records only, systemd not asked
        assert (st.interrupted is not None) == intent_path(paths).exists(), n
        if st.interrupted is None:
            assert normalized(without_temps(files_of(root))) in (before, reference), n
        else:
            assert st.interrupted["op"] == "restart" and st.exit_code == 1
        if n % 2:  # the rollback alone gives back every file byte for byte (the records' times included)
            recover(paths, Systemd(stand_in_systemctl, Path("/")))
            assert files_of(root) == files_of(seed), n
        # the next restart rolls the killed one back first, then ends where an uninterrupted one ends
        assert restart_driver(root, new, scenario).stdout.strip() == code, n
        assert normalized(files_of(root)) == reference, n
        assert not temp_files(root), n
        shutil.rmtree(root)

    kills, last = every_kill_point(killed, after_kill)
    assert last.stdout.strip() == code, last.stderr
    assert normalized(files_of(tmp_path / f"k{kills + 1}")) == reference
    assert kills > 7, f"only {kills} checkpoints in restart"


def test_a_bug_in_the_middle_of_install_is_exit_70_and_rolled_back_by_the_next_run(
    tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    profile = write_profile("extends: sim\nserver:\n  api_key_file: /etc/kimi-serve/crash.yaml\n", name="bug")
    root = tmp_path / "root"
    root.mkdir()
    r = install(profile, root, hook="raise-at=service.write.enabled")  # unit written and enabled, then a bug
    assert r.returncode == 70 and "internal error: InjectedFault" in r.stderr and r.stderr.count("\n") == 1
    paths = ServicePaths(root.resolve(), UNIT)
    assert intent_path(paths).exists() and paths.unit_file.exists()
    st = json.loads(cli("status", "--root", str(root), "--json").out)
    assert st["interrupted"]["op"] == "install-service"
    recover(paths, Systemd(run, paths.root))
    assert files_of(root) == {}  # the unit, its enablement and the key file it created are gone again


@pytest.mark.usefixtures("kill_points")
def test_a_deployment_install_killed_at_every_checkpoint_is_rolled_back_then_finished(
    tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    """The replicated deployment (two replica units, the router, the router's timer): SIGKILL at every checkpoint of
    install-service, over an installed deployment whose router port changes. After each kill `status` names the
    interrupted change; the rollback alone gives back the files byte for byte, and the next install-service (every
    third point: it costs four systemd-analyze runs) ends byte for byte where an uninterrupted one ends; no journal
    or journal temp file is left either way."""
    key = "  api_key_file: /etc/kimi-serve/fleet.yaml\n"
    first = write_profile(f"extends: sim-dp2\nservice:\n  unit_name: fleet\nserver:\n{key}", name="fleet1")
    second = write_profile("extends: fleet1\nrouter:\n  port: 30457\n", name="fleet2")
    seed = tmp_path / "seed"
    seed.mkdir()
    assert install(first, seed).returncode == 0
    before = files_of(seed)
    ref = tmp_path / "ref"
    shutil.copytree(seed, ref, symlinks=True)
    done = install(second, ref)
    assert done.returncode == 0, done.stderr
    reference = files_of(ref)
    assert reference != before

    def killed(n: int, hook: str) -> subprocess.CompletedProcess[str]:
        root = tmp_path / f"k{n}"
        shutil.copytree(seed, root, symlinks=True)
        return install(second, root, hook=hook)

    def after_kill(n: int, _r: subprocess.CompletedProcess[str]) -> None:
        root = tmp_path / f"k{n}"
        state = root / "var/lib/kimi-serve/service"
        journals = sorted(p.name for p in state.glob(".*.intent.json")) if state.is_dir() else []
        st = json.loads(cli("status", "--unit-name", "fleet", "--root", str(root), "--json").out)
        interrupted = [m for m in [st["router"], *st["replicas"]] if m and m["interrupted"]]
        if journals:  # killed inside the change: status names it for the member whose journal is there
            assert interrupted and all(m["interrupted"]["op"] == "install-service" for m in interrupted), (n, st)
            assert sorted(f".{i['unit'].removesuffix('.service')}.intent.json" for i in st["interrupted"]) == journals
        else:
            assert not interrupted and without_temps(files_of(root)) in (before, reference), n
        if n % 3:  # the rollback alone (every member's journal, router first) gives back the files byte for byte,
            # or, killed once replica 0's journal (the change's anchor, removed first) was gone, finishes the change
            finished = bool(journals) and ".fleet-r0.intent.json" not in journals
            recover_fleet(Systemd(run, root.resolve()), "fleet.service")
            expected = reference if finished else before
            assert files_of(root) == expected, (n, sorted(set(files_of(root)) ^ set(expected)))
        else:  # ... and the next install-service (which rolls back first, itself) ends where a clean one ends
            again = cli("install-service", "-p", str(second), "--root", str(root), "--replace")
            assert again.code == 0, (n, again.err)
            assert files_of(root) == reference, (n, sorted(set(files_of(root)) ^ set(reference)))
        assert not list(state.glob(".*.intent.json*")), n  # no journal, no journal temp file
        if not n % 3:
            assert not temp_files(root), n  # the rerun (under the lock) removed every killed write's temp file
        shutil.rmtree(root)

    kills, last = every_kill_point(killed, after_kill)
    assert last.returncode == 0, last.stderr
    assert files_of(tmp_path / f"k{kills + 1}") == reference
    assert kills >= 10, f"only {kills} checkpoints in a deployment's install-service"


@pytest.mark.usefixtures("kill_points")
def test_a_deployment_uninstall_killed_at_every_checkpoint_is_finished_by_the_next_run(
    tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    """uninstall-service of a deployment SIGKILLed at every checkpoint: the next uninstall-service leaves exactly what
    an uninterrupted one leaves (the key file; no member unit, previous.service, timer, alert unit or journal)."""
    profile = write_profile(
        "extends: sim-dp2\nservice:\n  unit_name: fleet\nserver:\n  api_key_file: /etc/kimi-serve/fleet.yaml\n",
        name="fleet1",
    )
    seed = tmp_path / "seed"
    seed.mkdir()
    assert install(profile, seed).returncode == 0
    changed = write_profile("extends: fleet1\nenv:\n  KIMI_TEST_SECOND: '1'\n", name="fleet2")
    assert install(changed, seed).returncode == 0  # a changed second install: every member has a previous.service
    assert len(list(seed.glob("var/lib/kimi-serve/service/*/previous.service"))) == 3
    ref = tmp_path / "ref"
    shutil.copytree(seed, ref, symlinks=True)
    env = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_TEST_HOOK"}
    assert shared().run(["uninstall-service", "--unit-name", "fleet", "--root", str(ref)], env=env).returncode == 0
    reference = files_of(ref)
    assert not [f for f in reference if f.endswith((".service", ".timer"))], reference

    def argv(n: int) -> list[str]:
        return ["uninstall-service", "--unit-name", "fleet", "--root", str(tmp_path / f"u{n}")]

    def killed(n: int, hook: str) -> subprocess.CompletedProcess[str]:
        shutil.copytree(seed, tmp_path / f"u{n}", symlinks=True)
        return shared().run(argv(n), env={**env, "KIMI_SERVE_TEST_HOOK": hook})

    def after_kill(n: int, _r: subprocess.CompletedProcess[str]) -> None:
        root = tmp_path / f"u{n}"
        again = cli(*argv(n))
        assert again.code == 0, (n, again.err)
        assert files_of(root) == reference, (n, sorted(set(files_of(root)) ^ set(reference)))
        assert not (root / UNIT_DIR / "kimi-serve-alert@.service").exists(), n  # no timer left needs it
        state = root / "var/lib/kimi-serve/service"
        assert not [d.name for d in state.iterdir() if d.name.startswith("fleet")], n  # no member's records folder
        assert not temp_files(root), n
        shutil.rmtree(root)

    kills, last = every_kill_point(killed, after_kill)
    assert last.returncode == 0, last.stderr
    assert files_of(tmp_path / f"u{kills + 1}") == reference
    assert kills >= 6, f"only {kills} checkpoints in a deployment's uninstall-service"


@pytest.mark.usefixtures("kill_points")
def test_a_fresh_deployment_install_killed_at_every_checkpoint_then_run_without_the_key_ends_whole_or_absent(
    tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    """A replicated install (two replicas, the router: three member units, the key file created from
    $KIMI_SERVE_API_KEY) SIGKILLed at every checkpoint, then run again from a shell WITHOUT the key: it ends whole
    (every member, the key file the killed run wrote, byte for byte where an uninterrupted install ends) or, when the
    killed run had not written the key file yet, refuses naming the missing key and leaves nothing (absent). Never
    some members without the others or without the key file; no journal and no temp file left. `status --profile`
    names the interrupted change of every journalled member before the rerun, installed or not."""
    profile = write_profile(FLEET, name="fleet1")
    ref = tmp_path / "ref"
    ref.mkdir()
    assert install(profile, ref).returncode == 0
    reference = files_of(ref)
    members = {f"{UNIT_DIR}/fleet-{m}.service" for m in ("r0", "r1", "router")}
    assert members | {"etc/kimi-serve/fleet.yaml"} <= set(reference), sorted(reference)
    outcomes: dict[str, list[int]] = {"whole": [], "absent": []}

    def killed(n: int, hook: str) -> subprocess.CompletedProcess[str]:
        root = tmp_path / f"f{n}"
        root.mkdir()
        return install(profile, root, hook=hook)

    def after_kill(n: int, _r: subprocess.CompletedProcess[str]) -> None:
        root = tmp_path / f"f{n}"
        state = root / "var/lib/kimi-serve/service"
        journals = sorted(p.name for p in state.glob(".*.intent.json")) if state.is_dir() else []
        st = cli("status", "-p", str(profile), "--root", str(root), "--json")
        named = sorted(f".{i['unit'].removesuffix('.service')}.intent.json" for i in json.loads(st.out)["interrupted"])
        assert named == journals and (st.code == 1 or not journals), (n, st.out)
        if journals:
            text = cli("status", "-p", str(profile), "--root", str(root)).out
            assert "INTERRUPTED:" in text and "`kimi-serve install-service`" in text, (n, text)
        had_key = (root / "etc/kimi-serve/fleet.yaml").is_file()  # the killed run wrote it: the rerun must reuse it
        again = install(profile, root, key=False)
        assert again.returncode == 0 or not had_key, (n, again.stderr)
        if again.returncode == 0:
            outcomes["whole"].append(n)
            assert files_of(root) == reference, (n, sorted(set(files_of(root)) ^ set(reference)))
        else:  # the key file was not written yet: nothing to reuse, so nothing is left
            outcomes["absent"].append(n)
            assert again.returncode == 1 and "API-key file" in again.stderr and "does not exist" in again.stderr, (
                n,
                again.stderr,
            )
            assert files_of(root) == {}, (n, sorted(files_of(root)))
        assert not temp_files(root) and not list(state.glob(".*.intent.json")), (n, temp_files(root))
        shutil.rmtree(root)

    kills, last = every_kill_point(killed, after_kill)
    assert last.returncode == 0, last.stderr
    assert files_of(tmp_path / f"f{kills + 1}") == reference
    assert kills >= 20 and outcomes["whole"] and outcomes["absent"], (kills, outcomes)


def test_status_names_a_deployment_install_killed_before_its_first_unit_and_the_rerun_leaves_no_temp_file(
    tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    """One kill, at the third checkpoint: replica 0's journal is written, replica 1's is a temp file, no unit yet.
    `status --profile` (and `status --unit-name`) names the interrupted install-service of that member and the
    command that settles it; the next install-service ends whole with no temp file left."""
    profile = write_profile(FLEET, name="fleet1")
    root = tmp_path / "root"
    root.mkdir()
    assert install(profile, root, hook="kill-at=3").returncode == -9
    for how in (["-p", str(profile)], ["--unit-name", "fleet"]):
        st = cli("status", *how, "--root", str(root))
        assert st.code == 1, st.out
        line = next(x for x in st.out.splitlines() if x.startswith("INTERRUPTED:"))
        assert "fleet-r0.service: an interrupted `kimi-serve install-service` (pid" in line, line
        assert "the next install-service, uninstall-service or restart rolls it back" in line, line
        data = json.loads(cli("status", *how, "--root", str(root), "--json").out)
        assert [(i["unit"], i["op"]) for i in data["interrupted"]] == [("fleet-r0.service", "install-service")], data
    assert temp_files(root)  # the second member's journal, killed before its rename
    again = cli("install-service", "-p", str(profile), "--root", str(root), "--replace")
    assert again.code == 0, again.err
    assert not temp_files(root), temp_files(root)
    assert json.loads(cli("status", "-p", str(profile), "--root", str(root), "--json").out)["interrupted"] == []


@pytest.mark.parametrize("point", ["service.monitor.removed", "service.uninstall.records"])
def test_an_uninstall_killed_after_a_member_unit_is_gone_is_finished_by_the_next_run(
    point: str, tmp_path: Path, write_profile: Callable[..., Path], cli
) -> None:
    """Killed after the router's verify timer is removed (the alert template not yet), or after the router's unit is
    removed (its records folder not yet): the next uninstall-service removes those too."""
    profile = write_profile(FLEET, name="fleet1")
    root = tmp_path / "root"
    root.mkdir()
    assert install(profile, root).returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_TEST_HOOK"}
    argv = ["uninstall-service", "--unit-name", "fleet", "--root", str(root)]
    assert shared().run(argv, env={**env, "KIMI_SERVE_TEST_HOOK": f"kill-at={point}"}).returncode == -9
    again = cli(*argv)
    assert again.code == 0, again.err
    assert files_of(root) == {"etc/kimi-serve/fleet.yaml": files_of(root)["etc/kimi-serve/fleet.yaml"]}
    assert not [d.name for d in (root / "var/lib/kimi-serve/service").iterdir()], "a member's records folder is left"
