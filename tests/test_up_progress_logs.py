"""`up`'s live progress line (rich, on a terminal), its bounded log files, and `kimi-serve logs`."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import pytest

from kimi_serve.commands.logs_cmd import journal_argv
from kimi_serve.process.startup_log import Progress, StartupTracker
from kimi_serve.up import console as console_mod
from kimi_serve.up import logfiles
from kimi_serve.up.console import Console, status_text


def test_status_text_names_phase_elapsed_weights_and_deadline():
    p = Progress(phase="weights", shards_done=27, shards_total=64)
    assert status_text(p, 133, 1800) == (
        "loading weights | 2m13s elapsed | weights 42% (27/64 shards) | deadline 30m00s (27m47s left)"
    )


def test_weights_percentage_comes_from_sglangs_own_bar():
    t = StartupTracker(tp_size=1)
    t.feed("[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=90.00 GB")
    t.feed("Loading safetensors checkpoint shards:  50% Completed | 32/64 [01:00<01:00,  1.00s/it]")
    assert "weights 50% (32/64 shards)" in status_text(t.progress, 60, 1800)


def test_terminal_line_refreshes_while_the_server_is_silent(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(console_mod.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    c = Console(out=out, err=io.StringIO(), tty=True)
    p = Progress(phase="weights", shards_done=1, shards_total=4)
    seen = []
    for second in range(4):  # no server line at all: only ticks
        clock[0] = 100.0 + second
        c.tick(p, float(second), 600)
        c.tick(p, float(second) + 0.1, 600)  # within the same second: no redraw
        seen.append(out.getvalue())
    assert "0m00s elapsed" in seen[0] and "0m03s elapsed" in seen[3] and "0m00s elapsed | weights 25%" in seen[0]
    assert out.getvalue().count("elapsed") == 4 and "\x1b[" in out.getvalue()  # redrawn in place (ANSI, by rich)
    c.info("[ready] server ready")
    c.end_progress()
    assert "kimi-serve up: [ready] server ready" in out.getvalue()


def test_plain_output_gets_a_status_line_every_few_seconds(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(console_mod.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    c = Console(out=out, err=io.StringIO(), tty=False)
    for t in range(0, 25):
        clock[0] = 100.0 + t
        c.tick(Progress(phase="init"), float(t), 600)
    lines = [ln for ln in out.getvalue().splitlines() if "elapsed" in ln]
    assert len(lines) == 3 and "\x1b" not in out.getvalue()  # at 0s, 10s, 20s


SITE = "/opt/engine/lib/python3.11/site-packages"
# what SGLang 0.5.23 prints at every start on the CPU engine, and on its error responses (FastAPI >= 0.128)
NOISE = [
    f"{SITE}/sglang/srt/layers/quantization/awq/awq.py:53: UserWarning: Only CUDA, HIP and XPU support AWQ currently.",
    '  warnings.warn(f"Only CUDA, HIP and XPU support AWQ currently.")',
    f"{SITE}/sglang/srt/layers/quantization/gguf.py:76: UserWarning: Only CUDA, MUSA and NPU support GGUF "
    "quantization currently.",
    '  warnings.warn(f"Only CUDA, MUSA and NPU support GGUF quantization currently.")',
    f"{SITE}/sglang/srt/entrypoints/openai/serving_chat.py:2428: FastAPIDeprecationWarning: ORJSONResponse is "
    "deprecated, FastAPI now serializes data directly to JSON bytes via Pydantic when a return type or response model "
    "is set",
    "  return self.create_error_response(str(e))",
]
KEPT = [
    "[2026-12-07 05:31:13] Attention backend not specified. Use triton backend by default.",
    f"{SITE}/torch/cuda/__init__.py:61: UserWarning: The pynvml package is deprecated.",  # another warning: shown
    "  import pynvml  # type: ignore[import]",
    "  an indented line after an ordinary one",
]


def test_the_known_start_warnings_are_not_echoed_and_every_other_line_is() -> None:
    """up's console leaves out the AWQ/GGUF and FastAPI deprecation warnings (both lines of each) of one server and
    of each replica, and echoes everything else, other warnings included (the log file keeps every line)."""
    from kimi_serve.up.replicas import TaggedConsole

    out = io.StringIO()
    c = Console(out=out, err=io.StringIO(), tty=False)
    r0 = TaggedConsole(c, "r0")
    for line in [*NOISE, KEPT[0], NOISE[0], *KEPT[1:], *NOISE[4:]]:
        c.server_line(line)
        r0.server_line(line)
    shown = out.getvalue().splitlines()
    assert [ln for ln in shown if not ln.startswith("[r0] ")] == KEPT
    assert [ln.removeprefix("[r0] ") for ln in shown if ln.startswith("[r0] ")] == KEPT


def _make_logs(folder: Path, profile: str, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"up-{profile}-20260101-0000{i:02d}.log" for i in range(n)]
    for p in paths:
        p.write_text(f"{p.name}\n")
    return paths


def test_log_files_are_bounded_per_profile(tmp_path: Path):
    logs = _make_logs(tmp_path, "sim", 12)
    other = _make_logs(tmp_path, "prod", 2)
    deleted = logfiles.prune("sim", keep=10, folder=tmp_path)
    assert deleted == logs[:3] and logfiles.up_logs("sim", tmp_path) == logs[3:]  # 9 + the one about to start
    assert logfiles.up_logs("prod", tmp_path) == other
    assert logfiles.up_logs("si", tmp_path) == []  # a prefix is not the profile


def test_logs_shows_ups_newest_file_and_follows(cli, tmp_path: Path):
    folder = Path(os.environ["KIMI_SERVE_STATE_DIR"]) / "logs"
    paths = _make_logs(folder, "sim", 2)
    paths[-1].write_text("".join(f"line {i}\n" for i in range(100)))
    res = cli("logs", "-p", "sim", "-n", "3", "--up")
    assert res.code == 0, res.err
    assert res.out.splitlines() == ["line 97", "line 98", "line 99"] and str(paths[-1]) in res.err
    out = io.StringIO()
    done = threading.Event()
    worker = threading.Thread(
        target=logfiles.follow, args=(paths[-1], out), kwargs={"stop": done.is_set, "poll_s": 0.05}
    )
    worker.start()
    time.sleep(0.3)
    with paths[-1].open("a") as f:
        f.write("appended\n")
    deadline = time.monotonic() + 10
    while "appended" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    worker.join(5)
    assert out.getvalue() == "appended\n"


def test_logs_without_any_log_is_one_line(cli):
    res = cli("logs", "-p", "sim", "--up")
    assert res.code == 1 and "no `up` log found" in res.err and "kimi-serve up -p sim" in res.err


@pytest.mark.parametrize("follow, tail", [(True, ["-f"]), (False, ["--no-pager"])])
def test_journal_command(follow, tail):
    assert journal_argv("sglang-kimi.service", 20, follow) == [
        "journalctl",
        "-u",
        "sglang-kimi.service",
        "-n",
        "20",
        "-o",
        "cat",
        *tail,
    ]
