"""What root writes or chowns never follows a link out of where it means to write (security round three), and names
that become paths are refused before anything is touched.

- install-service --root R: a link planted in R at the key file or the working directory (or on the way to them)
  that leads outside R is refused (exit 5, one line naming the path and the fix); the outside target keeps its
  owner, mode and bytes.
- a lock (the verify timer's METRICS.lock, kimi-serve's own locks) planted as a link, or a hard link, to a private
  file is refused, never opened for writing: the file keeps its bytes.
- unit names `..`, `.`, empty, `a/b`, a leading `-`: install-service, uninstall-service and status exit 2 with one
  line and touch nothing (the records of every unit and the server's working directory survive).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.lock import file_lock
from kimi_serve.verify.metrics import run_lock

SECRET = "root: private bytes\n"


@pytest.fixture(autouse=True)
def _no_sglang_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    monkeypatch.setenv("KIMI_SERVE_API_KEY", "sk-test-links")


@pytest.fixture
def profile(write_profile: Callable[..., Path]) -> Path:
    return write_profile("extends: sim\nserver:\n  api_key_file: /etc/kimi-serve/test-secrets.yaml\n", name="svc")


def _tree(root: Path) -> dict[str, tuple[int, int, int, bytes | str]]:
    """Every path under ``root`` (links not followed): owner, group, mode and bytes (a link: its target)."""
    out: dict[str, tuple[int, int, int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in ["", *dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.lstat()
            content: bytes | str = os.readlink(p) if p.is_symlink() else (p.read_bytes() if p.is_file() else b"")
            out[str(p)] = (st.st_uid, st.st_gid, st.st_mode, content)
    return out


def _outside(tmp_path: Path) -> Path:
    """Outside the install root: a root-owned private file with content and a directory."""
    out = tmp_path / "outside"
    out.mkdir(mode=0o700)
    key = out / "secret.yaml"
    key.write_text("api-key: outside-key\nadmin-api-key: outside-admin-key\n")
    key.chmod(0o600)
    return out


def _one_line_error(err: str, *words: str) -> str:
    line = err.strip()
    assert len(line.splitlines()) == 1 and line.startswith("kimi-serve: error:") and "fix:" in line, err
    assert "Traceback" not in err and all(w in line for w in words), line
    return line


@pytest.mark.usefixtures("systemd_tools")
@pytest.mark.parametrize(
    ("key", "link", "points_to"),
    [
        ("server.api_key_file", "etc/kimi-serve/test-secrets.yaml", "{out}/secret.yaml"),  # absolute, outside R
        ("server.api_key_file", "etc/kimi-serve/test-secrets.yaml", "../../../outside/secret.yaml"),  # climbs out
        ("service.working_directory", "var/lib/kimi-serve/server", "{out}"),
        ("service.working_directory", "var/lib/kimi-serve", "../../../outside"),  # a link on the way to it
    ],
)
def test_install_service_never_chowns_through_a_link_out_of_the_root(
    cli, root: Path, profile: Path, tmp_path: Path, key: str, link: str, points_to: str
) -> None:
    out = _outside(tmp_path)
    planted = root / link
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(points_to.format(out=out))
    outside, inside = _tree(out), _tree(root)
    r = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert r.code == ExitCode.ENVIRONMENT, (r.code, r.out, r.err)
    _one_line_error(r.err, str(root), "symbolic link")
    assert _tree(out) == outside  # owner, mode, bytes of the target: untouched
    assert _tree(root) == inside  # refused before anything was written under the root (no user, no unit)


def test_a_planted_metrics_lock_never_truncates_its_target(cli, tmp_path: Path) -> None:
    """The verify timer's METRICS.lock, planted by the owner of the textfile folder as a link to a root-owned 0600
    file: refused (exit 5, one line), the file keeps its bytes; also a hard link to it."""
    target = tmp_path / "shadow"
    target.write_text(SECRET)
    target.chmod(0o600)
    folder = tmp_path / "textfile"
    folder.mkdir()
    metrics = folder / "kimi.prom"
    (folder / "kimi.prom.lock").symlink_to(target)
    r = cli("verify", "--host", "127.0.0.1:9", "--wait", "0", "--metrics-file", str(metrics))
    assert r.code == ExitCode.ENVIRONMENT, (r.code, r.out, r.err)
    _one_line_error(r.err, "kimi.prom.lock", "symbolic link")
    assert target.read_text() == SECRET and not metrics.exists()
    (folder / "kimi.prom.lock").unlink()
    os.link(target, folder / "kimi.prom.lock")
    with pytest.raises(KimiServeError) as err, run_lock(metrics):
        pass
    assert err.value.exit_code == ExitCode.ENVIRONMENT and "hard link" in err.value.one_line()
    assert target.read_text() == SECRET


def test_kimi_serves_own_locks_refuse_a_planted_link(tmp_path: Path) -> None:
    target = tmp_path / "private"
    target.write_text(SECRET)
    target.chmod(0o600)
    lock = tmp_path / "locks" / "root-x.lock"
    lock.parent.mkdir()
    lock.symlink_to(target)
    with pytest.raises(KimiServeError) as err, file_lock(lock, "install-service"):
        pass
    assert err.value.exit_code == ExitCode.ENVIRONMENT and str(lock) in err.value.one_line()
    assert target.read_text() == SECRET and lock.is_symlink()


BAD_NAMES = ["..", ".", "", "a/b", "-x", "a\0b"]


@pytest.mark.usefixtures("systemd_tools")
def test_unit_names_that_are_not_one_path_component_touch_nothing(cli, root: Path, profile: Path) -> None:
    assert cli("install-service", "--profile", str(profile), "--root", str(root)).code == 0
    units = root / "etc/systemd/system"
    good = (units / "sglang-kimi.service").read_text()
    for planted in ("..service", "...service", "-x.service"):  # as an earlier install of such a name left them
        (units / planted).write_text(good)
    records = root / "var/lib/kimi-serve/service/sglang-kimi"
    (records / "last-good.json").write_text('{"profile": "svc"}\n')
    (root / "var/lib/kimi-serve/server/work").write_text("the server's own file\n")
    before = _tree(root)
    for command in ("install-service", "uninstall-service", "status"):
        for name in BAD_NAMES:
            extra = ["--profile", str(profile)] if command == "install-service" else []
            r = cli(command, *extra, "--unit-name", name, "--root", str(root))
            assert r.code == ExitCode.USAGE, (command, name, r.code, r.out, r.err)
            _one_line_error(r.err, "--unit-name", "invalid unit name")
            assert r.out == "", (command, name, r.out)
    assert _tree(root) == before  # last-good.json, the working directory, the units: all still there


@pytest.mark.usefixtures("systemd_tools")
def test_no_journal_or_record_is_written_through_a_link_out_of_the_root(
    cli, root: Path, profile: Path, tmp_path: Path
) -> None:
    """The records' folder a link out of R: refused at the plan (exit 5), before the intent journal beside it."""
    out = _outside(tmp_path)
    (root / "var/lib/kimi-serve").mkdir(parents=True)
    (root / "var/lib/kimi-serve/service").symlink_to(out)
    outside, inside = _tree(out), _tree(root)
    r = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert r.code == ExitCode.ENVIRONMENT, (r.code, r.out, r.err)
    _one_line_error(r.err, "var/lib/kimi-serve/service", "outside")
    assert _tree(out) == outside and _tree(root) == inside
    r = cli("uninstall-service", "--root", str(root))
    assert r.code == ExitCode.ENVIRONMENT and _tree(out) == outside, (r.code, r.out, r.err)


@pytest.mark.usefixtures("systemd_tools")
@pytest.mark.parametrize("field", ["files", "secret", "created_dirs"])
def test_a_journal_planted_in_a_scratch_root_rolls_back_nothing_outside(
    cli, root: Path, profile: Path, tmp_path: Path, field: str
) -> None:
    """A scratch root's intent journal is its owner's to write: recovery (as root) refuses one naming a path that
    leaves the root or is not one of the unit's files, and changes nothing."""
    out = _outside(tmp_path)
    escape = "../outside/secret.yaml"
    intent = {"op": "install-service", "unit": "sglang-kimi.service", "files": {}, "created_dirs": []}
    if field == "files":
        intent["files"] = {escape: {"text": "owned\n", "mode": 0o644}}
    elif field == "secret":
        intent["secret"] = escape
    else:
        intent["created_dirs"] = ["../outside"]
        (out / "secret.yaml").unlink()  # an empty folder rmdir would remove
    journal = root / "var/lib/kimi-serve/service/.sglang-kimi.intent.json"
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps(intent))
    outside = _tree(out)
    r = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert r.code == ExitCode.ENVIRONMENT, (r.code, r.out, r.err)
    _one_line_error(r.err, "journal", "refusing to roll back")
    assert _tree(out) == outside and journal.exists()


def test_check_fails_on_a_unit_name_that_is_not_one(cli) -> None:
    for name in ("..", ".", "-x", "a/b"):
        r = cli("check", "--profile", "sim", "--set", f"service.unit_name={name}")
        assert r.code == ExitCode.USAGE, (name, r.code, r.out)
        assert "FAIL [rules] --set: service.unit_name: invalid unit name" in r.out, r.out


@pytest.mark.parametrize("aside", ["staging", "old"])
def test_engine_install_never_renames_or_removes_through_a_link_beside_the_prefix(tmp_path: Path, aside: str) -> None:
    """A link planted at the staging or the old venv's name (beside the prefix): refused, not removed through nor
    renamed into the prefix (the units would run what it points to)."""
    from kimi_serve.engine.plan import EnginePlan
    from kimi_serve.engine.prefix import clear_leftovers

    out = _outside(tmp_path)
    plan = EnginePlan(tmp_path / "opt/venv", None, "uv", "uv", "python3", "3.11", (), None)  # type: ignore[arg-type]
    plan.prefix.parent.mkdir(parents=True)
    (plan.staging if aside == "staging" else plan.old).symlink_to(out)
    outside = _tree(out)
    with pytest.raises(KimiServeError) as err:
        clear_leftovers(plan.prefix)
    # a link at the old venv's name is what an older kimi-serve's install over a linked prefix left: named as that
    # (engine/prefix.py), with the operator's two ways out; either way refused, and nothing followed
    said = "moved" if aside == "old" else "symbolic link"
    assert err.value.exit_code == ExitCode.ENVIRONMENT and said in err.value.one_line(), err.value.one_line()
    assert _tree(out) == outside and not os.path.lexists(plan.prefix)


def _patch_journal(folder: Path) -> Path:
    from kimi_serve.core.journal import write_json

    write_json(folder / "intent.json", {"op": "apply"})  # a patch journal, and apply's pending record
    return folder / f".intent.json.{os.getpid()}.tmp"


def _patch_backup(folder: Path) -> Path:
    from kimi_serve.patches.files import Content
    from kimi_serve.patches.state import write_backups

    write_backups(folder, {"sglang/x.py": Content(b"original\n", 0o644)})
    return folder / "sglang/x.py"


def _service_journal(folder: Path) -> Path:
    from kimi_serve.core.journal import Journal

    # as service/journal.py writes one: inside the root, the journal's checkpoint before the rename
    Journal(folder / ".unit.intent.json", root=folder.parent).write({}, "service.journal.write")
    return folder / f"..unit.intent.json.{os.getpid()}.tmp"


@pytest.mark.parametrize("writer", [_patch_journal, _patch_backup, _service_journal])
def test_journals_and_backups_are_new_files_never_written_through_a_link(
    tmp_path: Path, writer: Callable[[Path], Path]
) -> None:
    """The temporary file of a journal, a patch backup: a link planted at its (predictable) name is replaced by a
    new file, and what it pointed to keeps its bytes."""
    target = tmp_path / "private"
    target.write_text(SECRET)
    target.chmod(0o600)
    folder = tmp_path / "state"
    planted = writer(tmp_path / "probe")  # where this writer puts it
    planted = folder / planted.relative_to(tmp_path / "probe")
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(target)
    writer(folder)
    assert target.read_text() == SECRET and target.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("name", ["/", ".", "..", "", "{folder}"])
def test_a_metrics_file_that_names_a_folder_is_exit_2_creating_nothing(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """`--metrics-file` names the textfile and, beside it, its lock: a folder (``/``, ``.``, ``..``, empty, a
    directory) is one line, exit 2, and no lock is created next to it (``..lock``, ``DIR.lock``)."""
    work = tmp_path / "cwd"
    (work / "folder").mkdir(parents=True)
    monkeypatch.chdir(work / "folder")
    before = _tree(tmp_path)
    r = cli("verify", "--host", "127.0.0.1:9", "--wait", "0", "--metrics-file", name.format(folder=work / "folder"))
    assert r.code == ExitCode.USAGE, (r.code, r.out, r.err)
    _one_line_error(r.err, "--metrics-file", "names a folder")
    assert _tree(tmp_path) == before


@pytest.mark.usefixtures("systemd_tools")
def test_a_dangling_link_at_the_metrics_folder_is_refused_before_anything_is_written(
    cli, root: Path, profile: Path
) -> None:
    """install-service creates the textfile folder when missing: a dangling link there is refused at the plan
    (exit 5, one line), not created through nor a crash half-way."""
    folder = root / "var/lib/prometheus/node-exporter"
    folder.parent.mkdir(parents=True)
    folder.symlink_to("missing")
    before = _tree(root)
    r = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert r.code == ExitCode.ENVIRONMENT, (r.code, r.out, r.err)
    _one_line_error(r.err, str(folder), "does not exist")
    assert _tree(root) == before


# ------------------------------------------------------------------ a root that changes under the install (round four)


def _swap_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, at: str, swap: Callable[[], None]) -> Path:
    """Run ``swap`` once, at the first checkpoint named ``at`` (kimi_serve/core/faults.py's ``pause-at``, its sleep
    replaced in-process): a folder of the root replaced by a link between two of root's writes, as its owner could
    do. The checkpoints passed are traced to the file returned."""
    from types import SimpleNamespace

    from kimi_serve.core import faults

    trace, done = tmp_path / "trace", []

    def at_pause(_seconds: float) -> None:
        if not done:
            done.append(True)
            swap()

    monkeypatch.setattr(faults, "time", SimpleNamespace(sleep=at_pause))
    monkeypatch.setenv("KIMI_SERVE_TEST_HOOK", f"trace-to={trace},pause-at={at}:0")
    return trace


SWAPS = [
    # (checkpoint, folder replaced by a link out of the root)
    ("service.write.account", "etc/systemd/system"),  # the service account has just appeared
    ("service.write.account", "var/lib/kimi-serve"),  # the working directory's folder, before its mkdir and chown
    ("service.write.workdir", "var/lib/kimi-serve"),  # made, not yet chowned
    ("service.write.workdir", "etc/kimi-serve"),  # the key file, before its chown
    ("service.write-atomic", "etc/systemd/system"),  # the unit's temp file written, its rename next
    ("service.journal.write", "var/lib/kimi-serve"),  # the intent journal's temp file written
    ("service.write.account", "etc/kimi-serve"),  # before the key file is created
]


@pytest.mark.usefixtures("systemd_tools")
@pytest.mark.parametrize("how", ["absolute", "climbs"])
@pytest.mark.parametrize(("at", "folder"), SWAPS)
def test_a_folder_swapped_for_a_link_mid_install_ends_it_with_nothing_written_outside(
    cli, root: Path, profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str, folder: str, how: str
) -> None:
    """Each write, mkdir and chown walks from the root again (O_NOFOLLOW at each component): the folder replaced by
    a link out of the root after the install began (its real folder moved aside inside the root) ends the install
    with one line naming the link (exit 5), and nothing outside the root is written, created or chowned."""
    out = _outside(tmp_path)
    place = root / folder
    depth = len(Path(folder).parts) - 1

    def swap() -> None:
        aside = root / "moved-aside" / place.name
        aside.parent.mkdir(parents=True, exist_ok=True)
        place.parent.mkdir(parents=True, exist_ok=True)
        if place.exists():
            place.rename(aside)
        place.symlink_to(str(out) if how == "absolute" else "../" * (depth + 1) + "outside")

    trace = _swap_at(monkeypatch, tmp_path, at, swap)
    outside = _tree(out)
    args = ["install-service", "--profile", str(profile), "--root", str(root)]
    r = cli(*args)
    assert f" {at}\n" in trace.read_text(), (r.code, r.err)  # the swap happened
    assert r.code == ExitCode.ENVIRONMENT, (r.code, r.out, r.err)
    _one_line_error(r.err, "symbolic link")
    assert _tree(out) == outside  # nothing written, created or chowned outside the root


@pytest.mark.usefixtures("systemd_tools")
def test_a_root_that_does_not_exist_yet_is_made(cli, tmp_path: Path, profile: Path) -> None:
    """The walk from the root starts at the root itself: a --root not made yet is made (as before), not exit 70."""
    root = tmp_path / "new-root"
    r = cli("install-service", "--profile", str(profile), "--root", str(root))
    assert r.code == 0, (r.code, r.out, r.err)
    assert (root / "etc/systemd/system/sglang-kimi.service").is_file()


@pytest.mark.usefixtures("systemd_tools")
@pytest.mark.parametrize(
    ("at", "folder", "planted"),
    [
        ("service.uninstall.remove", "etc/systemd/system", "sglang-kimi.service"),
        ("service.uninstall.records", "var/lib/kimi-serve", "service/sglang-kimi/last-good.json"),
    ],
)
def test_uninstall_never_removes_through_a_folder_swapped_for_a_link(
    cli, root: Path, profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str, folder: str, planted: str
) -> None:
    """uninstall-service removes the unit and the records by a walk from the root too: the folder swapped for a link
    out of the root mid-run (after systemctl disable) is exit 5, and the file of that name outside survives."""
    assert cli("install-service", "--profile", str(profile), "--root", str(root)).code == 0
    out = _outside(tmp_path)
    (out / planted).parent.mkdir(parents=True, exist_ok=True)
    (out / planted).write_text("outside, not kimi-serve's\n")

    def swap() -> None:
        (root / folder).rename(root / "moved-aside")
        (root / folder).symlink_to(out)

    trace = _swap_at(monkeypatch, tmp_path, at, swap)
    outside = _tree(out)
    r = cli("uninstall-service", "--root", str(root))
    assert f" {at}\n" in trace.read_text(), (r.code, r.err)
    assert r.code == ExitCode.ENVIRONMENT, (r.code, r.out, r.err)
    _one_line_error(r.err, "symbolic link")
    assert _tree(out) == outside
