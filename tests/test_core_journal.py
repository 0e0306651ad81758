"""core/journal.py, the one intent journal of service and patches: the bytes and modes earlier versions wrote (so
their journals are still read), what reads as unreadable, a write killed before its rename (a real SIGKILL), the
sweep of what killed writes left, the end of a change. The recovery built on it: tests/test_crash_recovery_*.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_serve.core.inputs import MAX_FILE_BYTES
from kimi_serve.core.journal import UNREADABLE, Journal, interrupted, write_json

INTENT = {"op": "apply", "set": "s", "pid": 4242, "started_at": "2026-01-01T00:00:00+00:00", "files": {"a.py": None}}


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_a_journal_is_written_in_the_form_earlier_versions_wrote_and_read(tmp_path: Path, mode: int) -> None:
    """Indented JSON and a newline (what service/journal.py and patches/journal.py wrote before they shared this),
    the mode from the first byte whatever the umask, no temporary file left; read back as written."""
    journal = Journal(tmp_path / "state" / ".unit.intent.json", mode=mode)
    old = os.umask(0o077)
    try:
        journal.write(INTENT)
    finally:
        os.umask(old)
    assert journal.path.read_text(encoding="utf-8") == json.dumps(INTENT, indent=2) + "\n"
    assert journal.path.stat().st_mode & 0o7777 == mode
    assert sorted(p.name for p in journal.path.parent.iterdir()) == [".unit.intent.json"]
    assert journal.read() == INTENT
    # a journal an earlier version left on disk (written by hand here, as it wrote it) reads the same
    journal.path.write_text(json.dumps(INTENT, indent=2) + "\n", encoding="utf-8")
    assert journal.read() == INTENT


@pytest.mark.parametrize(
    "content",
    [b"", b"{", b"[]", b"{}", b'"x"', b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b" " * (MAX_FILE_BYTES + 1)],
    ids=["empty", "cut", "list", "empty-object", "string", "not-utf8", "deep", "huge"],
)
def test_what_is_not_a_journal_reads_as_unreadable_never_a_crash(tmp_path: Path, content: bytes) -> None:
    """A journal cut by a crash, damaged, or planted: the unreadable form (op ``unknown``), a copy each time."""
    journal = Journal(tmp_path / "x.intent.json")
    journal.path.write_bytes(content)
    got = journal.read()
    assert got == UNREADABLE and got is not UNREADABLE
    got["op"] = "changed"
    assert UNREADABLE == {"op": "unknown", "unreadable": True}


def test_no_journal_reads_as_none_and_removing_one_twice_is_fine(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "state" / "x.intent.json")
    assert journal.read() is None
    journal.remove()  # its folder does not even exist
    journal.write({"op": "revert"})
    journal.remove()
    journal.remove()
    assert journal.read() is None and list(journal.path.parent.iterdir()) == []


def test_a_write_killed_before_its_rename_leaves_the_old_journal_and_a_temp_file_the_sweep_removes(
    tmp_path: Path,
) -> None:
    """SIGKILL at the write's checkpoint (the test hook, a real process): the journal is the old one, whole; the
    only trace is the temporary file, which the next run's sweep removes with an earlier version's (.NAME.tmp) and
    nothing else."""
    journal = Journal(tmp_path / "x.intent.json")
    journal.write(INTENT)
    code = (
        "import sys; from pathlib import Path; from kimi_serve.core.journal import Journal;"
        "Journal(Path(sys.argv[1])).write({'op': 'revert'}, 'journal.test.write')"
    )
    env = {**os.environ, "KIMI_SERVE_TEST_HOOK": "kill-at=journal.test.write"}
    child = subprocess.Popen([sys.executable, "-c", code, str(journal.path)], env=env)
    assert child.wait(timeout=60) == -signal.SIGKILL
    assert journal.read() == INTENT
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != journal.path.name)
    assert left == [f".x.intent.json.{child.pid}.tmp"]
    (tmp_path / ".x.intent.json.tmp").write_text("{")  # an earlier version's temp name
    (tmp_path / ".y.intent.json.7.tmp").write_text("{")  # another journal's
    (tmp_path / ".x.intent.json.7.tmp.keep").write_text("{")  # not a temp file of this journal
    journal.sweep()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".x.intent.json.7.tmp.keep",
        ".y.intent.json.7.tmp",
        "x.intent.json",
    ]


def test_write_json_follows_no_link_out_of_its_root(tmp_path: Path) -> None:
    """A folder on the way swapped for a link out of the root: refused (exit 5), nothing written outside."""
    from kimi_serve.core.errors import ExitCode, KimiServeError

    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "var").mkdir(parents=True)
    (root / "var" / "lib").symlink_to(outside)
    with pytest.raises(KimiServeError) as err:
        write_json(root / "var/lib/x.intent.json", {"op": "apply"}, root=root)
    assert err.value.exit_code == ExitCode.ENVIRONMENT
    assert list(outside.iterdir()) == []


def test_interrupted_names_the_command_the_pid_and_the_start() -> None:
    assert (
        interrupted(INTENT, "patches") == "an interrupted `patches apply` (pid 4242, started 2026-01-01T00:00:00+00:00)"
    )
    assert interrupted({}, "kimi-serve") == "an interrupted `kimi-serve ?` (pid ?, started ?)"
