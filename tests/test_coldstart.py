"""The cold-start floor on a small real checkpoint made here (safetensors shards written by tests/ckpt_helpers.py):
the bandwidth probe's bound, page-cache residency before and after `prewarm`, its refusal, the start history, the
doctor lines and the ETA arithmetic. No SGLang needed (the real-load test is tests/test_coldstart_sglang.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from ckpt_helpers import opaque_checkpoint

from kimi_serve.core.report import to_json
from kimi_serve.host import coldstart as cs
from kimi_serve.host.floor import coldstart_report, figures
from kimi_serve.host.starts import MAX_STARTS, append_start, predict_weights_s, read_starts
from kimi_serve.prewarm.page_cache import prewarm
from kimi_serve.process.startup_log import Event, StartupTracker
from kimi_serve.profile.loader import load_profile
from kimi_serve.up.phases import PhaseClock

SHARD = 8 * cs.MIB


@pytest.fixture
def ckpt_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    for f in opaque_checkpoint(d, 4, SHARD):
        cs.drop_cache(f)
    return d


def _profile(tmp_path: Path, model: Path) -> Path:
    path = tmp_path / "cold.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        extends: sim
        engine: sglang
        model:
          path: {model}
        speculative:
          enabled: false
        """)
    )
    return path


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_checkpoint_bytes_come_from_the_index(ckpt_dir: Path) -> None:
    ck = cs.checkpoint_of([ckpt_dir])
    assert ck.shards == 4 and ck.missing == 0
    assert ck.total == sum(f.stat().st_size for f in ckpt_dir.glob("*.safetensors"))
    (ckpt_dir / "model-00004-of-00004.safetensors").unlink()
    assert cs.checkpoint_of([ckpt_dir]).missing == 1


def test_probe_is_sane_and_never_reads_past_its_bound(ckpt_dir: Path) -> None:
    ck = cs.checkpoint_of([ckpt_dir])
    bound = 12 * cs.MIB
    before = _rchar()
    bw = cs.probe_bandwidth(ck, bound=bound)
    read = _rchar() - before
    assert 0 < bw.bytes_read <= bound
    assert read <= bound + 64 * 1024, f"read {read} bytes for a {bound}-byte bound"  # + mincore/stat noise
    assert 1e6 < bw.bytes_per_s < 1e12, to_json(bw)  # between 1 MB/s and 1 TB/s
    assert bw.method == "O_DIRECT"
    # the bound is capped at the checkpoint's size
    assert cs.probe_bandwidth(ck, bound=10 * 1024**3).bytes_read <= ck.total


def test_probe_leaves_the_page_cache_as_it_found_it(ckpt_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = cs.checkpoint_of([ckpt_dir])
    with open(ck.files[0], "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)  # no asynchronous readahead to race the figures
        f.read(2 * cs.MIB)  # something cached before the probe
    cached = cs.residency(ck)
    for _ in range(20):  # let any readahead already in flight settle
        time.sleep(0.05)
        cached, previous = cs.residency(ck), cached
        if cached == previous:
            break
    assert cached > 0
    cs.probe_bandwidth(ck, bound=16 * cs.MIB)  # O_DIRECT bypasses the cache
    assert cs.residency(ck) == cached
    monkeypatch.delattr(os, "O_DIRECT")  # the fallback: uncached pages only, dropped again afterwards
    bw = cs.probe_bandwidth(ck, bound=16 * cs.MIB)
    assert bw.method.startswith("uncached pages") and 0 < bw.bytes_read <= 16 * cs.MIB
    assert cs.residency(ck) == cached


def test_prewarm_fills_the_page_cache(ckpt_dir: Path, tmp_path: Path) -> None:
    p = load_profile(str(_profile(tmp_path, ckpt_dir)))
    fig = figures(p, tmp_path / "state", probe="never")
    assert fig.cached == 0
    seen: list[tuple[int, int]] = []
    res = prewarm(fig, progress=lambda done, total: seen.append((done, total)))
    assert res.status == "done", to_json(res)
    assert res.bytes_read == res.to_read == fig.checkpoint.total
    assert res.cached_after == fig.checkpoint.total == cs.residency(fig.checkpoint)
    assert seen[-1] == (fig.checkpoint.total, fig.checkpoint.total)
    again = prewarm(figures(p, tmp_path / "state", probe="never"))
    assert again.status == "nothing_to_do" and again.bytes_read == 0


def test_prewarm_refuses_when_ram_does_not_allow(ckpt_dir: Path, tmp_path: Path) -> None:
    p = load_profile(str(_profile(tmp_path, ckpt_dir)))
    fig = figures(p, tmp_path / "state", probe="never")
    tight = cs.Figures(
        fig.checkpoint, 0, mem_available=fig.checkpoint.total, mem_total=fig.checkpoint.total * 4, bandwidth=None
    )
    res = prewarm(tight)
    assert res.status == "refused" and res.bytes_read == 0
    assert "do not fit" in res.reason
    assert cs.residency(fig.checkpoint) == 0  # nothing was read


def test_prewarm_stops_when_memory_runs_short_and_when_asked(ckpt_dir: Path, tmp_path: Path) -> None:
    p = load_profile(str(_profile(tmp_path, ckpt_dir)))
    fig = figures(p, tmp_path / "state", probe="never")
    calls = [0]

    def shrinking() -> int:  # MemAvailable seen by the reader: fine for two blocks, then below the margin
        calls[0] += 1
        return fig.mem_available if calls[0] <= 2 else 0

    res = prewarm(fig, mem=shrinking, threads=1)
    assert res.status == "ram_short"
    assert 0 < res.bytes_read < fig.checkpoint.total
    stop = threading.Event()
    stop.set()
    assert prewarm(figures(p, tmp_path / "state", probe="never"), stop=stop).status == "interrupted"


def test_prewarm_cli_json_and_refusal(ckpt_dir: Path, tmp_path: Path, cli) -> None:
    profile = str(_profile(tmp_path, ckpt_dir))
    res = cli("prewarm", "--profile", profile, "--json")
    assert res.code == 0, res.err
    report = json.loads(res.out)
    assert report["status"] == "done" and report["cached_after"] == report["checkpoint_bytes"]
    sim = cli("prewarm", "--profile", "sim")
    assert sim.code == 2 and "reads no checkpoint" in sim.err


@pytest.mark.parametrize("fault", ["dangling", "missing", "fifo", "directory"])
def test_prewarm_refuses_a_shard_that_is_not_a_regular_file_at_once(fault: str, ckpt_dir: Path, tmp_path: Path) -> None:
    """A dangling link or a missing shard would fail the load anyway ("100% cached" was a lie); a FIFO would block the
    reader forever. Each is exit 5 naming the shard, before anything is read (a FIFO is never opened)."""
    shard = sorted(ckpt_dir.glob("*.safetensors"))[1]
    shard.unlink()
    if fault == "dangling":
        shard.symlink_to(tmp_path / "gone.safetensors")
    elif fault == "fifo":
        os.mkfifo(shard)
    elif fault == "directory":
        shard.mkdir()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kimi_serve", "prewarm", "--profile", str(_profile(tmp_path, ckpt_dir))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 5, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"shard {shard} is" in lines[0] and "nothing was read" in lines[0], done.stderr
    words = {"dangling": "dangling symlink", "missing": "missing", "fifo": "a FIFO", "directory": "a directory"}
    assert words[fault] in lines[0] and "fix:" in lines[0] and "Traceback" not in done.stderr
    assert time.monotonic() - started < 30
    assert all(cs.cached_bytes(f) == 0 for f in ckpt_dir.glob("*.safetensors") if f.is_file())  # nothing read


def test_history_is_bounded_and_predicts_from_overhead(tmp_path: Path, ckpt_dir: Path) -> None:
    for i in range(MAX_STARTS + 5):
        append_start(
            tmp_path,
            {
                "profile": "p",
                "n": i,
                "phases": {"weights": 12.0},
                "figures": {"checkpoint_bytes": 1000, "uncached_floor_s": 2.0},
            },
        )
    starts = read_starts(tmp_path)
    assert len(starts) == MAX_STARTS and starts[-1]["n"] == MAX_STARTS + 4
    ck = cs.Checkpoint((ckpt_dir / "x",), (1000,))
    fig = cs.Figures(ck, cached=500, mem_available=0, mem_total=0, bandwidth=100.0)
    predicted, how = predict_weights_s(fig, starts)
    assert predicted == pytest.approx(5.0 + 10.0) and "overhead" in how  # 500 uncached B at 100 B/s + 10 s
    assert predict_weights_s(fig, [])[0] == pytest.approx(5.0)


def test_doctor_lines_name_the_floor_and_its_parts(ckpt_dir: Path, tmp_path: Path) -> None:
    p = load_profile(str(_profile(tmp_path, ckpt_dir)))
    found = {f.code: f for f in coldstart_report(p, tmp_path / "state")[0]}
    assert {"checkpoint", "read_bandwidth", "page_cache", "ram", "floor"} <= set(found)
    assert "4 shard(s)" in found["checkpoint"].message
    assert "O_DIRECT" in found["read_bandwidth"].message
    assert "disk floor" in found["floor"].message
    assert (tmp_path / "state" / "coldstart" / "bandwidth.json").is_file()  # remembered for `up`


def test_eta_line_uses_the_pace_then_the_prediction() -> None:
    tracker = StartupTracker()
    clock = PhaseClock(None, predicted_weights_s=100.0, now=0.0)
    bar = "Multi-thread loading shards:  25% Completed | 1/4 [00:10<00:30,  10.00s/it]"
    clock.on_event(Event("phase", "weights", "loading weights"), now=10.0)
    assert clock.eta_s(0, 4, now=30.0) == pytest.approx(80.0)  # no shard yet: prediction minus time spent
    (shards,) = [e for e in tracker.feed(bar) if e.kind == "shards"]
    shown = clock.on_event(shards, now=30.0)
    assert "ETA 1m00s" in shown.text and "predicted 1m40s" in shown.text  # 20 s per shard, 3 to go
    clock.on_event(Event("phase", "kv_cache", "kv"), now=50.0)
    clock.on_event(Event("phase", "http", "http"), now=52.0)
    clock.on_event(Event("phase", "ready", "ready"), now=55.0)
    d = clock.durations()
    assert d["weights"] == pytest.approx(40.0) and d["kv_cache"] == pytest.approx(2.0)
    assert d["warmup"] == pytest.approx(3.0) and d["cuda_graph"] is None and d["contract"] is None


def test_restart_prewarm_fills_the_cache_first_or_notes_why_not(ckpt_dir: Path, tmp_path: Path, cli) -> None:
    from kimi_serve.core.settings import state_root
    from kimi_serve.prewarm.report import prewarm_first
    from kimi_serve.profile.loader import load_profile

    said: list[str] = []
    root = state_root()
    done = prewarm_first(
        load_profile(str(_profile(tmp_path, ckpt_dir))), state_root=root, progress=None, say=said.append
    )
    assert done["status"] == "done" and done["cached_after"] == done["checkpoint_bytes"]
    assert said[0].startswith("prewarming") and said[-1] == "prewarm: done"
    skipped = prewarm_first(
        load_profile("sim"), state_root=root, progress=None, say=said.append
    )  # the simulator reads no checkpoint: restart goes on
    assert skipped["status"] == "skipped" and "reads no checkpoint" in said[-1]
    assert "--prewarm" in cli("restart", "--help").out
