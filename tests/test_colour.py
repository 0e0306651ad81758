"""Colour on a terminal, honouring NO_COLOR (no-color.org): the one decision (core/output.py ``colour``) and the
status words of the findings renderers (check, doctor, verify) coloured on a real pty, never in a pipe or with
NO_COLOR set to anything."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from kimi_serve.core.output import colour, paint_statuses


def test_check_colours_its_status_words_on_a_terminal_only(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "kimi_serve", "check", "-p", "sim", "--offline"]
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    main, child_end = pty.openpty()
    child = subprocess.Popen(args, stdout=child_end, stderr=subprocess.DEVNULL, env=env)
    os.close(child_end)
    shown = b""
    while True:
        try:
            piece = os.read(main, 65536)
        except OSError:
            break
        if not piece:
            break
        shown += piece
    child.wait(60)
    os.close(main)
    assert b"\x1b[32mok\x1b[0m" in shown, shown[:400]
    piped = subprocess.run(args, capture_output=True, env=env, timeout=60)
    assert b"\x1b[" not in piped.stdout and b"ok   [schema]" in piped.stdout
    no_color = subprocess.run(args, capture_output=True, env={**env, "NO_COLOR": "1"}, timeout=60)
    assert b"\x1b[" not in no_color.stdout


def test_the_colour_decision(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    main, child_end = pty.openpty()
    try:
        with os.fdopen(child_end, "w", closefd=False) as tty, os.fdopen(os.pipe()[1], "w") as pipe:
            monkeypatch.delenv("NO_COLOR", raising=False)
            assert colour(tty) and not colour(pipe)
            monkeypatch.setenv("NO_COLOR", "")  # empty: as if unset (no-color.org)
            assert colour(tty)
            monkeypatch.setenv("NO_COLOR", "0")  # any value
            assert not colour(tty)
    finally:
        os.close(main)
        os.close(child_end)
    text = "PASS tool stream 0.10s\nFAIL tool plain 0.20s: raw\nWARN x: y\ntool  plain  pass  0.1s  ok"
    painted = paint_statuses(text, True)
    for word, code in (("PASS", "32"), ("FAIL", "1;31"), ("WARN", "33"), ("pass", "32")):
        assert f"\x1b[{code}m{word}\x1b[0m" in painted
    assert "tool plain" in painted and paint_statuses(text, False) == text
