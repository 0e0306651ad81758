"""`up`'s logs are bounded and read from the end (docs/up.md, "Start" and `kimi-serve logs`): a server's log is
rotated to ``FILE.1`` before it passes its cap (a real child writing through :class:`Server`); `logs -n N` finds the
last N lines from the end of a 300 MB file with the memory of a tiny one (a real CLI process, its peak RSS from
``wait4``), across ``FILE.1`` and ``FILE``, on the exact cases (no final newline, empty lines, a multi-byte character
across a block edge); `-f` follows across a rotation; pruning takes the ``.1`` along."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.process.child import Server
from kimi_serve.process.server_log import BLOCK, CappedLog, rotated, tail_bytes, write_tail
from kimi_serve.up import logfiles


def _tail(path: Path, n: int) -> str:
    out = io.StringIO()
    write_tail(path, n, out)
    return out.getvalue()


def _expected(data: bytes, n: int) -> str:
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return "".join(f"{line}\n" for line in lines[-n:]) if n > 0 and text else ""


CASES = {
    "plain": b"a\nb\nc\n",
    "no final newline": b"a\nb\nc",
    "empty lines": b"\n\nx\n\n",
    "one long line": b"x" * (3 * BLOCK + 17) + b"\n",
    "long lines across blocks": b"".join(b"%d " % i * (i % 700 + 1) + b"\n" for i in range(2000)),
    "multibyte across a block edge": b"a" * (BLOCK - 1) + "\u00e9\u20ac\n".encode() + b"z\n",
    "tqdm carriage returns": b"load 1/4\rload 2/4\rload 4/4\ndone\n",
    "empty": b"",
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 50, 10_000])
def test_tail_reads_the_last_lines_from_the_end(tmp_path: Path, name: str, n: int) -> None:
    data = CASES[name]
    log = tmp_path / "up.log"
    log.write_bytes(data)
    assert _tail(log, n) == _expected(data, n)


@pytest.mark.parametrize("cut", [0, 1, 2, 5, BLOCK - 3, BLOCK, BLOCK + 1, -1])
@pytest.mark.parametrize("n", [1, 2, 3, 700, 3000])
def test_tail_reads_file_1_and_file_as_one_log(tmp_path: Path, cut: int, n: int) -> None:
    """The rotation cuts anywhere (a chunk's edge, mid-line, mid-character): FILE.1 + FILE read as one stream."""
    data = b"".join(f"line {i} \u00e9 ".encode() * (i % 40 + 1) + b"\n" for i in range(2500))
    at = len(data) + cut if cut < 0 else cut
    log = tmp_path / "up.log"
    rotated(log).write_bytes(data[:at])
    log.write_bytes(data[at:])
    assert _tail(log, n) == _expected(data, n)


def test_logs_n_3_of_a_300_mb_log_holds_what_a_tiny_one_does(tmp_path: Path) -> None:
    """A real `kimi-serve logs` process, its peak RSS from wait4; the log is sparse (300 MB, a hole then lines,
    nothing on disk), so reading the whole file as before would hold 300 MB and more (and print NULs)."""
    lines = [f"2026-01-01 00:00:{i % 60:02d} [INFO] decode batch {i}\n" for i in range(200)]
    peaks = {}
    for name, hole in (("tiny", 0), ("huge", 300 * 1024 * 1024)):
        state = tmp_path / name
        log = state / "logs" / "up-sim-20260101-000000.log"
        log.parent.mkdir(parents=True)
        with log.open("wb") as f:
            f.truncate(hole)
            f.seek(0, os.SEEK_END)
            f.write("".join(lines).encode())
        out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with out.open("wb") as o, err.open("wb") as e:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kimi_serve", "logs", "-p", "sim", "--up", "-n", "3"],
                stdout=o,
                stderr=e,
                env={**os.environ, "KIMI_SERVE_STATE_DIR": str(state)},
            )
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0, err.read_text()
        assert out.read_text() == "".join(lines[-3:]) and str(log) in err.read_text()
        peaks[name] = usage.ru_maxrss / 1024
    # generous: the same process within 64 MB, where reading the file would add at least 300 MB
    assert peaks["huge"] < peaks["tiny"] + 64, peaks


def test_a_server_log_is_rotated_before_it_passes_its_cap(tmp_path: Path) -> None:
    """A real child writing ~1.6 MB through `up`'s Server with a 256 KiB cap: FILE and FILE.1 each within the cap,
    together the newest output, ending with its last line; the Server's own log_tail reads across them."""
    cap = 256 * 1024
    log = tmp_path / "server.log"
    script = "import sys\nfor i in range(40000):\n    sys.stdout.write(f'line {i:06d} ' + 'x' * 24 + '\\n')\n"
    server = Server.start([sys.executable, "-c", script], dict(os.environ), log, keep_lines=False, log_max_bytes=cap)
    assert server.proc.wait(60) == 0
    deadline = time.monotonic() + 10
    while not server.output_closed and time.monotonic() < deadline:
        server.lines(0.2)
    server.close()
    full = "".join(f"line {i:06d} {'x' * 24}\n" for i in range(40000)).encode()
    older, newer = rotated(log).read_bytes(), log.read_bytes()
    assert 0 < len(older) <= cap and 0 < len(newer) <= cap
    assert full.endswith(older + newer) and len(older + newer) >= cap
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log", "server.log.1"]  # never a .2
    assert server.log_tail(3) == [f"line {i:06d} {'x' * 24}" for i in (39997, 39998, 39999)]
    assert tail_bytes(log, len(newer) + 10) == (older + newer)[-(len(newer) + 10) :]


def test_capped_log_keeps_appending_to_an_existing_file_within_the_cap(tmp_path: Path) -> None:
    log = tmp_path / "f.log"
    log.write_bytes(b"x" * 90)
    capped = CappedLog(log, max_bytes=100)
    capped.write(b"y" * 10)  # 100: still within
    assert log.read_bytes() == b"x" * 90 + b"y" * 10 and not rotated(log).exists()
    capped.write(b"z")  # 101 would pass the cap: rotate first
    capped.write(b"w" * 99)
    capped.write(b"v" * 5)
    capped.close()
    assert rotated(log).read_bytes() == b"z" + b"w" * 99 and log.read_bytes() == b"v" * 5


def test_follow_goes_on_across_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    capped = CappedLog(log, max_bytes=40)
    capped.write(b"first line\n")
    out = io.StringIO()
    end = logfiles.tail(log, 5, out)
    assert out.getvalue() == "first line\n"
    capped.write(b"second line, rotated before it is written\n")  # 11 + 42 > 40: between the tail and -f
    assert rotated(log).read_bytes() == b"first line\n"
    done = threading.Event()
    worker = threading.Thread(
        target=logfiles.follow, args=(log, out), kwargs={"start": end, "stop": done.is_set, "poll_s": 0.05}
    )
    worker.start()
    try:
        time.sleep(0.3)
        capped.write(b"third line\n")  # rotates again: follow drains the old file first
        time.sleep(0.3)
        capped.write(b"fourth line\n")
        deadline = time.monotonic() + 10
        while "fourth" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        worker.join(5)
        capped.close()
    assert rotated(log).is_file()
    expected = "first line\nsecond line, rotated before it is written\nthird line\nfourth line\n"
    assert out.getvalue() == expected


def test_prune_takes_the_rotated_part_along(tmp_path: Path) -> None:
    logs = [tmp_path / f"up-sim-20260101-0000{i:02d}.log" for i in range(4)]
    for p in logs:
        p.write_text("x\n")
        rotated(p).write_text("older\n")
    assert logfiles.prune("sim", keep=2, folder=tmp_path) == logs[:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [logs[3].name, rotated(logs[3]).name]


def test_a_log_that_cannot_be_read_is_one_line_exit_1(cli: Callable[..., Any], tmp_path: Path) -> None:
    folder = Path(os.environ["KIMI_SERVE_STATE_DIR"]) / "logs"
    (folder / "up-sim-20260101-000000.log").mkdir(parents=True)  # a directory where the newest log should be
    res = cli("logs", "-p", "sim", "--up")
    assert res.code == 1, res.err
    assert "cannot read the log" in res.err and "up-sim-20260101-000000.log" in res.err
    assert "Traceback" not in res.err and len(res.err.strip().splitlines()) == 2  # the ==> header, then the one line


def test_logs_into_a_pipe_closed_early_ends_quietly(tmp_path: Path) -> None:
    """`kimi-serve logs -n 100000 | head -1`: the reader goes away; `logs` ends with 0 and says nothing more."""
    state = tmp_path / "state"
    log = state / "logs" / "up-sim-20260101-000000.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i} {'x' * 80}\n" for i in range(100_000)))  # ~9 MB: more than a pipe holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "kimi_serve", "logs", "-p", "sim", "--up", "-n", "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "KIMI_SERVE_STATE_DIR": str(state)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"line 0 ")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err and "cannot read" not in err, err


def test_a_log_that_can_no_longer_be_written_drops_lines_instead_of_raising(tmp_path: Path) -> None:
    """The reader thread that writes the log also drains the server's pipe: an error there would wedge the server."""
    folder = tmp_path / "logs"
    folder.mkdir()
    capped = CappedLog(folder / "up.log", max_bytes=10)
    capped.write(b"0123456789")
    (folder / "up.log").unlink()
    folder.rmdir()  # the rotation can neither move it nor start a new file
    capped.write(b"more\n")
    capped.write(b"and more\n")
    assert capped.closed
    capped.close()
