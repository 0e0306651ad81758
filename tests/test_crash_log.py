"""The crash log of an internal error (exit 70) keeps no secret: the command line's secret-bearing options and
--set values are redacted, the file is private (0600), and a link planted at its name is never followed."""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path

import pytest

from kimi_serve.core.crashlog import REDACTED, redact_args

SECRET = "SECRET123-not-for-disk"


def _crash(cli, monkeypatch: pytest.MonkeyPatch, *args: str) -> Path:
    monkeypatch.setenv("KIMI_SERVE_TEST_HOOK", "raise-at=verify.run")  # a kimi-serve bug inside verify
    res = cli("verify", *args)
    assert res.code == 70
    line = res.err.strip().splitlines()[-1]
    return Path(line.split("traceback: ")[1].split(";")[0])


def _plant_links(folder: Path, victim: Path) -> None:
    """Links at every name the log may take in the next seconds (its name is the time and this pid)."""
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for ahead in range(6):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + ahead))
        (folder / f"crash-{stamp}-{os.getpid()}.log").symlink_to(victim)


def test_the_crash_log_of_verify_holds_no_key_and_is_private(cli, monkeypatch, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    state = Path(os.environ["KIMI_SERVE_STATE_DIR"])
    _plant_links(state / "crash", victim)
    saved = _crash(cli, monkeypatch, "--api-key", SECRET, "--host", "127.0.0.1:9")
    text = saved.read_text()
    assert "InjectedFault" in text and f"--api-key {REDACTED}" in text
    assert SECRET not in text
    info = os.lstat(saved)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert victim.read_text() == "untouched\n"  # the planted link was replaced, not written through
    assert saved.is_relative_to(state)


def test_the_fallback_in_the_temp_dir_follows_no_planted_link(cli, monkeypatch, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    shared = tmp_path / "shared-tmp"
    _plant_links(shared, victim)
    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", str(victim))  # a file: no crash folder can be made under it
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    saved = _crash(cli, monkeypatch, f"--api-key={SECRET}", "--host", "127.0.0.1:9")
    assert saved.parent == shared and SECRET not in saved.read_text()
    assert stat.S_IMODE(os.lstat(saved).st_mode) == 0o600 and not saved.is_symlink()
    assert victim.read_text() == "untouched\n"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--api-key", "K1"], ["--api-key", REDACTED]),
        (["--admin-api-key=K2"], [f"--admin-api-key={REDACTED}"]),
        (["--hf-token", "K3", "--port", "1"], ["--hf-token", REDACTED, "--port", "1"]),
        (
            ["--set", "server.api_key=K4", "--set=a.password=K5"],
            ["--set", f"server.api_key={REDACTED}", f"--set=a.password={REDACTED}"],
        ),
        (["--set", "server.port=1"], ["--set", "server.port=1"]),
        (["--skip-tokenizer-init", "--host", "h"], ["--skip-tokenizer-init", "--host", "h"]),  # a flag: no value
        (["simulate", "--raw", "--", "--api-key", "K6"], ["simulate", "--raw", "--", "--api-key", REDACTED]),
    ],
)
def test_secret_bearing_options_are_redacted_in_both_forms(args, shown):
    assert redact_args(args)[0] == shown


def test_a_redacted_value_is_blanked_in_the_traceback_too():
    from kimi_serve.core.crashlog import crash_text

    text = crash_text("0", ["verify", "--api-key", SECRET], f"Traceback ...\nValueError: the server refused {SECRET}\n")
    assert SECRET not in text and f"ValueError: the server refused {REDACTED}" in text
