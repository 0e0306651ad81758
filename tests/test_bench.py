"""`kimi-serve bench`: verdicts and crossover, the pinned report schema, the charts, resume, the contract gate, the
agentic workload and the simulator's performance model. The one heavy test (an A/B on two real simulators with
SGLang's own bench_serving) is in test_bench_sim.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from contract_server import ContractServer

from kimi_serve.bench import chart, servers, verdict
from kimi_serve.bench import report as rp
from kimi_serve.bench.sweep import BenchOptions, run_bench
from kimi_serve.bench.workload import agentic_requests, prepare
from kimi_serve.profile.loader import load_profile
from kimi_serve.simulator.perf import PerfModel, PerfParams, SpecSettings, accept_probability

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

REPO = Path(__file__).resolve().parent.parent
EAGLE = SpecSettings("EAGLE3", steps=3, topk=1, draft_tokens=4)


def _cell(tok_s: float, itl: float = 10.0) -> dict:
    return {
        "output_throughput": tok_s,
        "request_throughput": tok_s / 100,
        "median_ttft_ms": 100.0,
        "p99_ttft_ms": 200.0,
        "median_itl_ms": itl,
        "p99_itl_ms": itl * 3,
        "median_e2e_latency_ms": 1000.0,
        "p99_e2e_latency_ms": 2000.0,
        "accept_length": None,
        "errors": 0,
    }


def _report(a: dict[int, list[float]], b: dict[int, list[float]], simulated: bool = True) -> dict:
    conc = sorted(a)
    profiles = [
        {"name": "A", "role": "profile", "simulated": simulated, "speedup": 1.0},
        {"name": "B", "role": "against", "simulated": simulated, "speedup": 1.0},
    ]
    cells = {"A": {c: [_cell(v) for v in a[c]] for c in conc}, "B": {c: [_cell(v) for v in b[c]] for c in conc}}
    return rp.build(
        profiles=profiles,
        cells=cells,
        concurrency=conc,
        repeat=len(a[conc[0]]),
        workload={"name": "agentic", "digest": "x", "requests": 8},
    )


# ------------------------------------------------------------------------------------------- verdict, crossover


def test_verdict_winner_margin_no_difference_and_crossover() -> None:
    r = _report({1: [100, 104], 8: [300, 310], 32: [500, 505]}, {1: [60, 62], 8: [305, 312], 32: [700, 690]})
    by_c = {v["concurrency"]: v for v in r["verdicts"]}
    assert by_c[1]["winner"] == "A" and by_c[1]["margin_pct"] == pytest.approx(100 * (102 - 61) / 61, abs=0.1)
    assert by_c[8]["winner"] is None and by_c[8]["overlap"] and by_c[8]["text"].startswith("no difference")
    assert by_c[32]["winner"] == "B"
    # "no difference" at 8 is skipped: the winner changes between 1 and 32
    assert r["crossover"]["between"] == [1, 32] and r["crossover"]["before"] == "A" and r["crossover"]["after"] == "B"


def test_no_crossover_when_one_profile_always_wins() -> None:
    r = _report({1: [100], 4: [200]}, {1: [50], 4: [100]})
    assert [v["winner"] for v in r["verdicts"]] == ["A", "A"] and r["crossover"] is None


def test_a_single_repeat_verdict_says_it_measured_no_spread() -> None:
    """--repeat 1: each verdict and the crossover say they rest on one sample (no spread) and how to confirm them;
    with two repeats on both sides, the same means read as a plain verdict."""
    r = _report({1: [100], 4: [100]}, {1: [50], 4: [200]})
    assert all(v["single_sample"] and "single sample" in v["text"] and "--repeat 2" in v["text"] for v in r["verdicts"])
    assert "single sample" in r["crossover"]["text"]
    assert "single sample" in rp.markdown(r).split("| C | verdict")[1]
    r = _report({1: [100, 100], 4: [100, 100]}, {1: [50, 50], 4: [200, 200]})
    assert not any(v["single_sample"] or "single" in v["text"] for v in r["verdicts"])
    assert r["crossover"]["text"] == "B overtakes A between concurrency 1 and 4"


def test_spread_overlap_decides_no_difference() -> None:
    a = verdict.summarize([_cell(100), _cell(110)])
    b = verdict.summarize([_cell(112), _cell(115)])
    assert verdict.compare(a, b, "A", "B")["winner"] is None
    c = verdict.summarize([_cell(130), _cell(131)])
    assert verdict.compare(a, c, "A", "B")["winner"] == "B"


def test_speedup_is_converted_back_to_model_time() -> None:
    cell = verdict.to_model_time(_cell(1000, itl=5), 4.0)
    assert cell["output_throughput"] == 250 and cell["median_itl_ms"] == 20 and cell["errors"] == 0


# ------------------------------------------------------------------------------------------------ report schema


TOP_KEYS = (
    "schema",
    "schema_version",
    "kimi_serve_version",
    "created",
    "simulated",
    "notice",
    "workload",
    "concurrency",
    "repeat",
    "profiles",
    "results",
    "verdicts",
    "crossover",
    "charts",
    "charts_skipped",
)
SUMMARY_KEYS = (
    "repeats",
    "output_tok_s",
    "req_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "accept_length",
    "errors",
    "accept_source",
)
VERDICT_KEYS = ("concurrency", "winner", "margin_pct", "overlap", "single_sample", "text")


def test_report_schema_is_pinned_and_documented() -> None:
    r = _report({1: [100]}, {1: [90]})
    assert r["schema"] == "kimi-serve.bench/1" and r["schema_version"] == 1
    assert tuple(r) == TOP_KEYS
    assert rp.PROFILE_KEYS == (
        "name",
        "role",
        "source",
        "base_url",
        "fingerprint",
        "simulated",
        "speedup",
        "perf_model",
    )
    assert tuple(r["profiles"][0]) == rp.PROFILE_KEYS
    assert tuple(r["results"]["A"]["1"]) == SUMMARY_KEYS
    assert set(r["results"]["A"]["1"]["output_tok_s"]) == {"mean", "min", "max"}
    assert tuple(r["verdicts"][0]) == VERDICT_KEYS
    json.dumps(r)  # serialisable as it is
    doc = (REPO / "docs" / "bench.md").read_text()
    for key in (*TOP_KEYS, *rp.PROFILE_KEYS, *SUMMARY_KEYS, *VERDICT_KEYS, rp.SCHEMA):
        assert f"`{key}`" in doc, f"docs/bench.md does not document `{key}`"


def test_model_reports_say_so_on_every_line() -> None:
    text = rp.markdown(_report({1: [100], 4: [200]}, {1: [90], 4: [250]}))
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| C ")]
    assert rows and all(line.rstrip().endswith("| MODEL |") for line in rows)
    assert text.count(rp.MODEL_NOTICE) == 2 and "MODEL" in text.splitlines()[-1]
    measured = rp.markdown(_report({1: [100]}, {1: [90]}, simulated=False))
    assert "MODEL" not in measured and "| measured |" in measured


# ------------------------------------------------------------------------------------------------------- charts


def test_charts_are_pngs_with_both_series(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    r = _report({1: [100, 110], 4: [300, 320], 16: [500, 520]}, {1: [60, 61], 4: [310, 330], 16: [700, 710]})
    names, plotted = chart.draw(r, tmp_path)
    assert names == ["tok_s.png", "itl_p99.png"]
    for name in names:
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert (width, height) == (700, 420) and len(data) > 10_000
        assert set(plotted[name]) == {"A", "B"} and all(len(points) == 3 for points in plotted[name].values())
    assert [p[:2] for p in plotted["tok_s.png"]["B"]] == [(1, 60.5), (4, 320.0), (16, 705.0)]
    assert not list(tmp_path.glob("*.tmp"))


# ------------------------------------------------------------------------------------------- resume, contract gate


def _recorded(tmp_path: Path, monkeypatch) -> tuple[Path, BenchOptions]:
    """An --out where every cell of sim vs sim-baseline at 1, 4 is recorded; starting anything fails the test."""
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    monkeypatch.setattr("kimi_serve.bench.servers.bring_up", lambda *a, **k: pytest.fail("a server was started"))
    monkeypatch.setattr("kimi_serve.bench.loadgen.run_cell", lambda *a, **k: pytest.fail("bench_serving ran"))
    out = tmp_path / "out"
    out.mkdir()
    workload = prepare("agentic", 4, out)
    for name, tok_s in (("sim", {1: 150.0, 4: 400.0}), ("sim-baseline", {1: 80.0, 4: 500.0})):
        fp = servers.fingerprint(load_profile(name))
        (out / "profiles").mkdir(exist_ok=True)
        (out / "profiles" / f"{name}.json").write_text(
            json.dumps({"name": name, "role": "x", "simulated": True, "speedup": 1.0})
        )
        for c, v in tok_s.items():
            path = out / "cells" / name / f"c{c}-r0.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"fingerprint": fp, "workload_digest": workload.digest, "figures": _cell(v)}))
    opts = BenchOptions(
        profile="sim",
        against="sim-baseline",
        concurrency=[1, 4],
        requests=4,
        workload="agentic",
        repeat=1,
        out=out,
        profiles=(load_profile("sim"), load_profile("sim-baseline")),
    )
    return out, opts


def test_resume_skips_recorded_cells_without_starting_a_server(tmp_path: Path, monkeypatch) -> None:
    out, opts = _recorded(tmp_path, monkeypatch)
    lines: list[str] = []
    r = run_bench(opts, lines.append)
    assert sum("already recorded" in line and "not started" in line for line in lines) == 2, lines
    assert r["crossover"]["between"] == [1, 4] and r["crossover"]["after"] == "sim-baseline"
    assert json.loads((out / "report.json").read_text())["verdicts"] == r["verdicts"]
    # a changed profile (another fingerprint) makes its cells stale: they would run again
    cell = out / "cells" / "sim" / "c4-r0.json"
    cell.write_text(json.dumps({**json.loads(cell.read_text()), "fingerprint": "other"}))
    with pytest.raises(BaseException, match="a server was started"):
        run_bench(opts, lines.append)


def test_without_matplotlib_the_charts_are_skipped_and_said(tmp_path: Path, monkeypatch) -> None:
    out, opts = _recorded(tmp_path, monkeypatch)
    monkeypatch.setattr("kimi_serve.bench.chart.matplotlib_missing", lambda: "matplotlib is not installed (test)")
    lines: list[str] = []
    r = run_bench(opts, lines.append)
    assert r["charts"] == [] and r["charts_skipped"] == "matplotlib is not installed (test)"
    assert "charts skipped: matplotlib is not installed (test)" in lines and not list(out.glob("*.png"))
    assert "Charts skipped: matplotlib is not installed (test)." in rp.markdown(r)


def test_a_server_that_fails_the_contract_is_refused(tmp_path: Path, cli) -> None:
    with ContractServer("no-tool-parser") as bad, ContractServer("correct") as good:
        r = cli(
            "bench",
            "--profile",
            "broken",
            "--against",
            "fine",
            "--host",
            bad.host,
            "--host",
            good.host,
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--out",
            str(tmp_path / "out"),
        )
    assert r.code == 1, r.err
    assert "broken at http://" in r.err and "fails the contract check" in r.err and "not benchmarked" in r.err
    assert r.err.count("kimi-serve: error:") == 1 and "Traceback" not in r.err
    assert not (tmp_path / "out" / "cells").exists() and not (tmp_path / "out" / "runs").exists()


def test_usage_errors(tmp_path: Path, cli) -> None:
    r = cli("bench", "--profile", "sim", "--against", "sim", "--out", str(tmp_path))
    assert r.code == 2 and "same profile" in r.err
    r = cli("bench", "--profile", "sim", "--against", "sim-baseline", "--concurrency", "1,x", "--out", str(tmp_path))
    assert r.code == 2 and "--concurrency" in r.err
    r = cli(
        "bench",
        "--profile",
        "sim",
        "--against",
        "sim-baseline",
        "--workload",
        str(tmp_path / "none.jsonl"),
        "--out",
        str(tmp_path),
    )
    assert r.code == 2 and "--workload" in r.err
    r = cli(
        "bench", "--profile", "sim", "--against", "sim-baseline", "--perf-model", '{"nope": 1}', "--out", str(tmp_path)
    )
    assert r.code == 2 and "nope" in r.err


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--repeat", "100000000000000000000000", "1..100"),
        ("--repeat", "1e23", "1..100"),
        ("--requests", "10000000", "1..100000"),
        ("--concurrency", "1e20", "1..4096"),
        ("--concurrency", "100000000000000000000", "1..4096"),
        ("--concurrency", "0,4", "1..4096"),
        ("--concurrency", ",".join(str(n) for n in range(1, 40)), "at most 32 values"),
    ],
)
def test_out_of_range_sizes_are_usage_errors_at_once(option: str, value: str, words: str, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Range-checked before anything starts: exit 2, one line naming the option and its range, at once."""
    started = time.monotonic()
    r = cli("bench", "--profile", "sim", "--against", "sim-baseline", option, value, "--out", str(tmp_path / "o"))
    assert r.code == 2, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and words in lines[0] and "fix:" in lines[0]
    assert time.monotonic() - started < 10 and not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------------------------------- workload


def test_agentic_workload_is_kimi_shaped_and_deterministic() -> None:
    reqs = agentic_requests(16)
    assert reqs == agentic_requests(16)
    assert all(
        r["tools"] and r["chat_template_kwargs"] == {"thinking": True} and r["ignore_eos"] is False for r in reqs
    )
    kinds = {("tool_result" if r["messages"][-1]["role"] == "tool" else r.get("tool_choice", "auto")) for r in reqs}
    assert kinds == {"tool_result", "auto", "none"}
    sizes = [len(json.dumps(r)) for r in reqs]
    assert min(sizes) > 4000 and max(sizes) > 15000  # system prompt + 7 tools; tool results of files and logs
    assert all(1024 <= r["max_tokens"] <= 2048 for r in reqs)


# ---------------------------------------------------------------------------------------- the performance model


def expected_tok_s(model: PerfModel, concurrency: int) -> float:
    """Steady-state decode throughput ``model`` implies at ``concurrency`` (model seconds, prefill excluded)."""
    batch = min(concurrency, model.max_running or concurrency)
    return batch * model.mean_accept() / (model.step_ms(batch, 0.0) / 1000)


def test_perf_model_defaults_match_the_published_figures() -> None:
    base = PerfModel(PerfParams(), None, 128)
    spec = PerfModel(PerfParams(), EAGLE, 48)
    assert 73 <= expected_tok_s(base, 1) <= 90  # K2.5 INT4, 8x RTX PRO 6000, single stream
    assert spec.mean_accept() == pytest.approx(2.9, abs=1e-6)
    assert expected_tok_s(spec, 1) > expected_tok_s(base, 1) and expected_tok_s(spec, 32) > expected_tok_s(base, 32)
    assert expected_tok_s(spec, 64) < expected_tok_s(base, 64)  # the crossover lies between 32 and 64


def test_accept_lengths_are_drawn_seeded_from_a_truncated_geometric() -> None:
    p = accept_probability(2.9, 3)
    assert sum(p**i for i in range(4)) == pytest.approx(2.9)
    a, b = PerfModel(PerfParams(seed=7), EAGLE, None), PerfModel(PerfParams(seed=7), EAGLE, None)
    draws = [a.draw_accept() for _ in range(20000)]
    assert draws[:50] == [b.draw_accept() for _ in range(50)]
    assert set(draws) == {1, 2, 3, 4} and sum(draws) / len(draws) == pytest.approx(2.9, abs=0.05)
    base = PerfModel(PerfParams(), None, None)
    assert {base.draw_accept() for _ in range(100)} == {1} and "avg_spec" not in str(base.describe())


def test_perf_params_overrides_are_checked() -> None:
    assert PerfParams.from_json('{"per_token_ms": 2}', "4").per_token_ms == 2.0
    assert PerfParams.from_json(None, "4").speedup == 4.0
    with pytest.raises(ValueError, match="unknown"):
        PerfParams.from_json('{"per_token": 2}')
    with pytest.raises(ValueError):
        PerfParams.from_json(None, "0")


def test_progress_and_table_agree_under_speedup(tmp_path: Path, monkeypatch) -> None:
    """--speedup 4: the simulators run 4x faster than the model; the progress line shows the table's figure (model
    time) and says so, not the raw 4x one."""
    import contextlib

    from kimi_serve.bench.loadgen import BenchEndpoint

    info = {"simulator": True, "internal_states": [{"perf_model": {"params": {"speedup": 4.0}}}]}

    @contextlib.contextmanager
    def bring_up(*_a, **_k):  # type: ignore[no-untyped-def]
        yield servers.Served(BenchEndpoint("http://127.0.0.1:9", "kimi-k2.5", None, None), info)

    monkeypatch.setattr("kimi_serve.bench.servers.bring_up", bring_up)
    monkeypatch.setattr("kimi_serve.bench.servers.contract_check", lambda *a, **k: None)
    monkeypatch.setattr("kimi_serve.sglang.site.require_sglang_python", lambda *_a: "python")
    monkeypatch.setattr("kimi_serve.bench.sweep._standin_tokenizer", lambda *_a: "tok")
    monkeypatch.setattr("kimi_serve.bench.loadgen.run_cell", lambda *a, **k: _cell(400.0))
    monkeypatch.setattr("kimi_serve.bench.chart.matplotlib_missing", lambda: "skipped in this test")
    opts = BenchOptions(
        profile="sim",
        against="sim-baseline",
        concurrency=[1],
        requests=2,
        workload="agentic",
        repeat=1,
        out=tmp_path / "out",
        profiles=(load_profile("sim"), load_profile("sim-baseline")),
        speedup=4.0,
    )
    lines: list[str] = []
    report = run_bench(opts, lines.append)
    table = report["results"]["sim"]["1"]["output_tok_s"]["mean"]
    assert table == 100.0, report["results"]["sim"]["1"]
    done = [line for line in lines if line.startswith("sim: concurrency 1:")]
    assert done and "100.0 tok/s" in done[0] and "400.0" not in done[0], lines
    assert "model time" in done[0] and "4x faster" in done[0], done
