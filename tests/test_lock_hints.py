"""Exit 75's fix names only options the refused command has: `--wait-lock` for the commands that can wait, none for
the others (`engine install` has no --wait-lock). Every command whose exit codes (kimi_serve/commands/exit_codes.py)
include 75 is refused here by a lock held in this process, and each option its fix names is checked against that
command's own Typer params.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main

from kimi_serve.cli import app
from kimi_serve.commands.exit_codes import EXIT_CODES
from kimi_serve.core.lock import lock_path, resource_lock_path, root_lock_path
from kimi_serve.verify.metrics import lock_file

CAN_EXIT_75 = sorted(name for name, text in EXIT_CODES.items() if re.search(r"\b75\b", text))


def _options(command: str) -> set[str]:
    cmd = typer.main.get_command(app)
    for word in command.split():
        cmd = cmd.commands[word]  # type: ignore[attr-defined]
    return {opt for param in cmd.params for opt in param.opts}


@contextlib.contextmanager
def _held(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (a lock file, or a folder) from this process, as another command holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY) if path.is_dir() else os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not path.is_dir():  # the holder's name, as file_lock writes it
            os.write(fd, json.dumps({"command": "held by the test", "pid": os.getpid(), "since": "now"}).encode())
        yield
    finally:
        os.close(fd)


def _refused(command: str, tmp_path: Path) -> tuple[list[str], Path]:
    """The argv of ``command`` and the lock that refuses it."""
    root, site = tmp_path / "root", tmp_path / "site-packages"
    root.mkdir()
    (site / "sglang").mkdir(parents=True)  # the lock is taken before the version is read
    state = ["--state-dir", str(tmp_path / "state")]
    metrics = tmp_path / "verify.prom"
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "capture"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    out.mkdir()
    cases = {
        "up": (["up", "--profile", "sim"], resource_lock_path("port", "30000")),
        "verify": (
            ["verify", "--host", "127.0.0.1:9", "--metrics-file", str(metrics), "--wait", "0"],
            lock_file(metrics),
        ),
        "install-service": (["install-service", "--profile", "sim", "--root", str(root)], root_lock_path(root)),
        "uninstall-service": (["uninstall-service", "--root", str(root)], root_lock_path(root)),
        "restart": (["restart", "--profile", "sim"], lock_path()),
        "patches apply": (["patches", "apply", "--site-packages", str(site), *state], site),
        "patches revert": (["patches", "revert", "--site-packages", str(site), *state], site),
        "capture": (
            ["capture", "--host", "127.0.0.1:9", "--prompts", str(prompts), "--out", str(out)],
            out,
        ),
        "engine install": (
            ["engine", "install", "--prefix", str(tmp_path / "v"), "--lock", "cpu", "--quiet"],
            tmp_path / ".v.kimi-serve.lock",
        ),
    }
    assert command in cases, f"`{command}` can exit 75 (commands/exit_codes.py): add how to refuse it here"
    return cases[command]


def test_the_table_is_read() -> None:
    assert {"engine install", "patches apply", "up", "restart"} <= set(CAN_EXIT_75) and len(CAN_EXIT_75) >= 8


@pytest.mark.parametrize("command", CAN_EXIT_75)
def test_the_fix_of_exit_75_names_only_the_commands_own_options(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # STAND-IN: a running systemd (this host has none: restart would refuse with 5 first, tests/test_no_systemd.py)
    monkeypatch.setattr("kimi_serve.service.systemctl.Systemd.unreachable", lambda self: None)
    argv, held = _refused(command, tmp_path)
    with _held(held):
        r = cli(*argv)
    assert r.code == 75, (r.out, r.err)
    assert r.err.count("\n") == 1 and "(fix: " in r.err, r.err
    fix = r.err.rsplit("(fix: ", 1)[1]
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", fix))
    own = _options(command)
    assert named <= own, f"`{command}` exit 75 suggests {sorted(named - own)}, which it does not have: {r.err}"
    if "--wait-lock" in own:  # the commands that can wait say so
        assert "--wait-lock" in named, r.err
