"""The SM120 patch set against scratch copies of the real SGLang 0.5.23 sources (from the cached pinned wheel).

Covers apply / status / idempotence / revert to identical bytes, atomicity (a conflict in a later patch's file, a
patch that fails on the staging copy, a failure while swapping files in), version refusal, and the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from patches_support import extract, pinned_wheel, snapshot

import kimi_serve.patches.files as patch_files
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.patches import (
    apply,
    available_patch_sets,
    check_applies_to_wheel,
    load_patch_set,
    revert,
    status,
)
from kimi_serve.sglang.site import installed_version, site_packages_of

SET = "sglang-0.5.23-sm120"
FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"
ENGINE = "sglang/srt/entrypoints/engine.py"
UNTOUCHED = "sglang/srt/layers/layernorm.py"


@pytest.fixture(scope="module")
def patch_set():
    return load_patch_set(SET)


@pytest.fixture
def site(tmp_path: Path, patch_set) -> Path:
    """A stand-in site-packages holding the real 0.5.23 files the set touches, version files, dist-info, one neighbour."""
    return extract(pinned_wheel(patch_set), tmp_path / "site-packages", whole_package=False, extra=(UNTOUCHED,))


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def states(st) -> list[str]:
    return [p.state.value for p in st.patches]


# --------------------------------------------------------------------------------------------- the set itself


def test_shipped_set_covers_the_prod_features_and_targets_0_5_23(patch_set) -> None:
    assert SET in available_patch_sets()
    assert patch_set.target_version == "0.5.23"
    assert {
        "flashinfer_allreduce_fusion",
        "torch_symm_mem",
        "redact_api_key_in_log",
        "redact_api_key_in_server_info",
    } <= set(patch_set.features)
    assert [p.name[:4] for p in patch_set.patches] == ["0001", "0002", "0003", "0004", "0005", "0006", "0007"]
    for patch in patch_set.patches:
        text = patch.path.read_text()
        header = text.split("\n--- a/", 1)[0]
        assert header.startswith("# kimi-serve patch") and "# What:" in header and "# Why:" in header, patch.name


def test_patches_apply_cleanly_to_the_pinned_wheel(patch_set) -> None:
    result = check_applies_to_wheel(patch_set, pinned_wheel(patch_set))
    assert result.ok, result.message
    assert result.wheel_version == "0.5.23"


def test_wheel_check_reports_a_patch_that_no_longer_applies(patch_set, tmp_path: Path) -> None:
    broken = _set_with_broken_last_patch(patch_set, tmp_path)
    result = check_applies_to_wheel(broken, pinned_wheel(patch_set))
    assert not result.ok
    assert "0007-" in result.message and "does not apply cleanly" in result.message


def test_unknown_set_is_a_usage_error() -> None:
    with pytest.raises(KimiServeError) as err:
        load_patch_set("sglang-9.9-nope")
    assert err.value.exit_code is ExitCode.USAGE and SET in err.value.message


def test_edited_patch_file_is_refused(patch_set, tmp_path: Path) -> None:
    copy = shutil.copytree(patch_set.directory, tmp_path / "set")
    with open(copy / patch_set.patches[1].name, "a") as fh:
        fh.write("\n")
    with pytest.raises(KimiServeError, match="0002-.*sha256"):
        load_patch_set(str(copy))


# -------------------------------------------------------------------------------- apply / status / revert


def test_apply_status_idempotence_and_revert_to_identical_bytes(site: Path, state: Path, patch_set) -> None:
    original = snapshot(site)
    st = status(site, patch_set, state_dir=state)
    assert states(st) == ["not applied"] * 7 and st.pristine and st.record is None
    assert st.features == {
        "flashinfer_allreduce_fusion": False,
        "torch_symm_mem": False,
        "redact_api_key_in_log": False,
        "redact_api_key_in_server_info": False,
    }

    first = apply(site, patch_set, state_dir=state)
    assert first.changed and first.status.all_applied
    assert first.status.features == {
        "flashinfer_allreduce_fusion": True,
        "torch_symm_mem": True,
        "redact_api_key_in_log": True,
        "redact_api_key_in_server_info": True,
    }
    for f in patch_set.files:
        assert patch_files.sha256_file(site / f.path) == f.after
    assert snapshot(site)[UNTOUCHED] == original[UNTOUCHED]
    record = first.status.record
    assert record["set"] == SET and record["sglang_version"] == "0.5.23" and record["kimi_serve_version"]
    assert set(record["files"]) == {f.path for f in patch_set.files}
    for rel, hashes in record["files"].items():
        assert patch_files.sha256_file(Path(record["backup_dir"]) / rel) == hashes["before"]

    patched = {p: (site / p).stat().st_mtime_ns for p in original}
    second = apply(site, patch_set, state_dir=state)
    assert not second.changed and "already applied" in second.message
    assert {p: (site / p).stat().st_mtime_ns for p in original} == patched

    undone = revert(site, patch_set, state_dir=state)
    assert undone.changed and states(undone.status) == ["not applied"] * 7
    assert undone.status.record is None
    assert snapshot(site) == original
    assert not revert(site, patch_set, state_dir=state).changed

    again = apply(site, patch_set, state_dir=state)
    assert again.changed and again.status.all_applied


def test_file_modes_are_kept(site: Path, state: Path, patch_set) -> None:
    os.chmod(site / FUSION, 0o640)
    apply(site, patch_set, state_dir=state)
    assert (site / FUSION).stat().st_mode & 0o7777 == 0o640
    revert(site, patch_set, state_dir=state)
    assert (site / FUSION).stat().st_mode & 0o7777 == 0o640


def test_stale_bytecode_of_touched_files_is_removed(site: Path, state: Path, patch_set) -> None:
    cache = site / "sglang/srt/layers/__pycache__"
    cache.mkdir()
    stale = cache / "flashinfer_comm_fusion.cpython-311.pyc"
    other = cache / "layernorm.cpython-311.pyc"
    for pyc in (stale, other):
        pyc.write_bytes(b"stale")
    apply(site, patch_set, state_dir=state)
    assert not stale.exists() and other.exists()
    stale.write_bytes(b"stale")
    revert(site, patch_set, state_dir=state)
    assert not stale.exists() and other.exists()


def test_record_goes_under_the_state_dir_from_the_environment(
    site: Path, tmp_path: Path, patch_set, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "env-state"
    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", str(root))
    apply(site, patch_set)
    records = list((root / "patches" / SET).glob("*/record.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["site_packages"] == str(site.resolve())


def test_revert_without_a_record_undoes_the_patches_exactly(site: Path, state: Path, patch_set) -> None:
    original = snapshot(site)
    apply(site, patch_set, state_dir=state)
    shutil.rmtree(state)  # record and backups lost (or the files were patched by another tool)
    result = revert(site, patch_set, state_dir=state)
    assert result.changed and "reverse patches" in result.message
    assert snapshot(site) == original


# ------------------------------------------------------------------------------------------------- atomicity


def test_conflict_planted_in_a_later_patch_file_changes_nothing(site: Path, state: Path, patch_set, cli) -> None:
    with open(site / ENGINE, "a") as fh:  # touched by 0006, a later patch
        fh.write("# local edit\n")
    before = snapshot(site)
    res = cli("patches", "apply", "--site-packages", str(site), "--state-dir", str(state))
    assert res.code == ExitCode.FAILED
    assert len(res.err.strip().splitlines()) == 1 and ENGINE in res.err and "nothing was changed" in res.err
    assert snapshot(site) == before
    assert not list(state.glob("patches/*/*/record.json"))
    st = status(site, patch_set, state_dir=state)
    assert states(st) == ["not applied"] * 5 + ["conflict", "not applied"]
    assert "matches neither" in st.patches[5].detail


def test_a_later_patch_failing_on_the_staging_copy_changes_nothing(
    site: Path, state: Path, patch_set, tmp_path: Path
) -> None:
    broken = _set_with_broken_last_patch(patch_set, tmp_path)
    before = snapshot(site)
    with pytest.raises(KimiServeError) as err:
        apply(site, broken, state_dir=state)
    assert err.value.exit_code is ExitCode.FAILED
    assert "0007-" in err.value.message and "does not apply cleanly" in err.value.message
    assert snapshot(site) == before
    assert not list(state.glob("patches/*/*/record.json"))


def test_failure_while_swapping_files_in_restores_every_file(
    site: Path, state: Path, patch_set, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(site)
    real_replace, calls = os.replace, []

    def third_replace_fails(src, dst, **at):
        if not str(dst).startswith(str(site)):  # the record and the journal in the state dir (renamed in their folder)
            return real_replace(src, dst, **at)
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(patch_files.os, "replace", third_replace_fails)
    with pytest.raises(KimiServeError) as err:
        apply(site, patch_set, state_dir=state)
    monkeypatch.undo()
    assert err.value.exit_code is ExitCode.ENVIRONMENT and "No space left" in err.value.message
    assert len(calls) > 3  # two files had been replaced, then were put back
    assert snapshot(site) == before
    assert not list(state.glob("patches/*/*/record.json"))
    assert not [p for p in site.rglob("*.kimi-serve.tmp")]


def test_revert_refuses_to_discard_someone_elses_edit(site: Path, state: Path, patch_set) -> None:
    apply(site, patch_set, state_dir=state)
    with open(site / FUSION, "a") as fh:
        fh.write("# hotfix\n")
    before = snapshot(site)
    with pytest.raises(KimiServeError) as err:
        revert(site, patch_set, state_dir=state)
    assert err.value.exit_code is ExitCode.FAILED and FUSION in err.value.message
    assert snapshot(site) == before


# ---------------------------------------------------------------------------------------- version refusal


def test_other_sglang_version_is_refused(site: Path, state: Path, patch_set, cli) -> None:
    version_py = site / "sglang/_version.py"
    version_py.write_text(version_py.read_text().replace("'0.5.23'", "'0.5.24'"))
    before = snapshot(site)
    for command in ("status", "apply", "revert"):
        res = cli("patches", command, "--site-packages", str(site), "--state-dir", str(state))
        assert res.code == ExitCode.ENVIRONMENT, command
        line = res.err.strip()
        assert len(line.splitlines()) == 1 and "0.5.24" in line and "0.5.23" in line
    assert snapshot(site) == before


def test_version_falls_back_to_dist_info(site: Path) -> None:
    (site / "sglang/_version.py").unlink()
    assert installed_version(site) == "0.5.23"


# ------------------------------------------------------------------------------------------------------- CLI


def test_cli_status_apply_revert(site: Path, state: Path, cli) -> None:
    args = ("--site-packages", str(site), "--state-dir", str(state))
    res = cli("patches", "status", *args)
    assert res.code == 1 and res.out.count("not applied") == 7 and "record: none" in res.out

    res = cli("patches", "apply", *args, "--json")
    data = json.loads(res.out)
    assert res.code == 0 and data["changed"] and data["applied"]
    assert [p["state"] for p in data["patches"]] == ["applied"] * 7

    res = cli("patches", "status", *args, "--json")
    data = json.loads(res.out)
    assert res.code == 0 and data["features"] == {
        "flashinfer_allreduce_fusion": True,
        "torch_symm_mem": True,
        "redact_api_key_in_log": True,
        "redact_api_key_in_server_info": True,
    }
    assert data["record"]["set"] == SET and all(f["state"] == "patched" for f in data["files"])

    res = cli("patches", "apply", *args)
    assert res.code == 0 and "already applied" in res.out

    res = cli("patches", "revert", *args)
    assert res.code == 0 and "restored 6 original files" in res.out and res.out.count("not applied") == 7


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("--site-packages", "{tmp}"), ExitCode.USAGE, "has no sglang package"),
        (("--site-packages", "{site}", "--python", "/usr/bin/python3"), ExitCode.USAGE, "mutually exclusive"),
        (("--site-packages", "{site}", "--patch-set", "nope"), ExitCode.USAGE, "unknown patch set"),
        (("--python", "{tmp}/no-python"), ExitCode.ENVIRONMENT, "not found"),
    ],
)
def test_cli_bad_input_is_one_line(site: Path, tmp_path: Path, cli, args, code, text) -> None:
    res = cli("patches", "status", *(a.format(tmp=tmp_path, site=site) for a in args))
    assert res.code == code and text in res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err


def test_site_packages_found_through_an_interpreter(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setenv("PYTHONPATH", str(site))  # this interpreter then finds the scratch sglang, without importing it
    assert site_packages_of(sys.executable) == site.resolve()
    monkeypatch.setenv("PYTHONPATH", "")
    with pytest.raises(KimiServeError) as err:
        site_packages_of(sys.executable)
    assert err.value.exit_code is ExitCode.ENVIRONMENT and "not installed" in err.value.message


# ---------------------------------------------------------------------------------------------------- helpers


def _set_with_broken_last_patch(patch_set, tmp_path: Path):
    """A copy of the set whose last patch expects a context line the real file does not have (manifest updated so
    the copy loads): it passes every hash check and fails only when GNU patch runs it on the staging copy."""
    copy = Path(shutil.copytree(patch_set.directory, tmp_path / "broken-set"))
    last = copy / patch_set.patches[-1].name
    text = last.read_text()
    context = "     result.update(scheduler_info)\n"
    assert context in text
    last.write_text(text.replace(context, context.replace("scheduler_info", "scheduler_infos"), 1))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["patches"][-1]["sha256"] = patch_files.sha256_file(last)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return load_patch_set(str(copy))  # loads: every hash check passes


# ------------------------------------------------------------------------------------- one SGLang, two state dirs


def test_two_applies_with_different_state_dirs_on_one_sglang_serialise(site: Path, tmp_path: Path, cli) -> None:
    """The lock belongs with what is changed: whatever their --state-dir, both need the lock of the site-packages
    they patch, so the second one exits 75 naming the first, changing nothing, or waits."""
    import subprocess
    import sys
    import time

    env = dict(os.environ, KIMI_SERVE_TEST_HOOK="pause-at=patches.apply.start:3")
    first = subprocess.Popen(
        [sys.executable, "-m", "kimi_serve", "patches", "apply", "--site-packages", str(site)]
        + ["--state-dir", str(tmp_path / "state-a")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lock = f"{os.major(site.stat().st_dev):02x}:{os.minor(site.stat().st_dev):02x}:{site.stat().st_ino}"
        end = time.monotonic() + 30  # until the first holds the flock on the site-packages folder (/proc/locks)
        while f" {first.pid} {lock} " not in Path("/proc/locks").read_text() and time.monotonic() < end:
            time.sleep(0.05)
        assert f" {first.pid} {lock} " in Path("/proc/locks").read_text(), "the first apply never took the site lock"
        before = snapshot(site)
        r = cli("patches", "apply", "--site-packages", str(site), "--state-dir", str(tmp_path / "state-b"))
        assert r.code == ExitCode.LOCKED, (r.out, r.err)
        assert (
            f"pid {first.pid} (" in r.err and "patches apply" in r.err and f"is changing the SGLang in {site}" in r.err
        )
        assert r.err.count("\n") == 1 and "--wait-lock" in r.err
        assert snapshot(site) == before  # nothing changed by the refused run
        # with --wait-lock the second waits for the first and then finds the set applied
        r = cli(
            "patches", "apply", "--site-packages", str(site), "--state-dir", str(tmp_path / "state-b"), "--wait-lock"
        )
        assert r.code == 0, (r.out, r.err)
        assert first.wait(30) == 0, first.stderr.read() if first.stderr else ""
    finally:
        first.kill()
        first.wait()
    assert set(states(status(site, load_patch_set(SET), state_dir=tmp_path / "state-b"))) == {"applied"}


def test_the_host_lock_does_not_stop_a_patch_of_a_venv_and_a_server_running_from_it_does(
    site: Path, state: Path, cli
) -> None:
    """Locks per resource: the host lock (held by, say, an `up` of the simulator or a service change) is not the
    venv's; `up` of an SGLang server holds its venv shared, and a change of that venv is refused (75, naming it)."""
    import fcntl

    from kimi_serve.core.lock import lock_path

    host = lock_path()
    host.parent.mkdir(parents=True, exist_ok=True)
    with open(host, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = cli("patches", "apply", "--site-packages", str(site), "--state-dir", str(state))
    assert r.code == 0 and "applied 7 patches" in r.out, r.err
    fd = os.open(site, os.O_RDONLY | os.O_DIRECTORY)  # what `up` holds while its server runs from this venv
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        before = snapshot(site)
        r = cli("patches", "revert", "--site-packages", str(site), "--state-dir", str(state))
    finally:
        os.close(fd)
    assert r.code == ExitCode.LOCKED and f"serves from the SGLang in {site.resolve()}" in r.err, r.err
    assert r.err.count("\n") == 1 and snapshot(site) == before


@pytest.mark.parametrize("unreadable", ["site-packages", "a patched file"])
def test_an_unreadable_sglang_is_exit_5_not_a_bug(
    site: Path, state: Path, cli, monkeypatch: pytest.MonkeyPatch, unreadable: str
) -> None:
    """What a non-root user meets in a root-owned venv (the tests run as root, so chmod would not stop them: the
    kernel's answer is stood in for): a one-line exit 5 with the fix, never 70 ("a bug in kimi-serve")."""
    denied = site / "sglang" if unreadable == "site-packages" else site / FUSION
    real_is_dir, real_read_bytes = Path.is_dir, Path.read_bytes

    def refuse(real):
        def call(self: Path, *a, **k):
            if self == denied:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *a, **k)

        return call

    before = snapshot(site)
    monkeypatch.setattr(Path, "is_dir", refuse(real_is_dir))
    monkeypatch.setattr(Path, "read_bytes", refuse(real_read_bytes))
    r = cli("patches", "apply", "--site-packages", str(site), "--state-dir", str(state))
    assert r.code == ExitCode.ENVIRONMENT, (r.out, r.err)
    assert "Permission denied" in r.err and "fix its permissions" in r.err and r.err.count("\n") == 1
    assert "internal error" not in r.err
    monkeypatch.undo()
    assert snapshot(site) == before
