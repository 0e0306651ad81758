"""`up`'s watch loop against the replay STAND-IN (tests/startup_replay.py) for failures a CPU box cannot produce:
CUDA OOM, NCCL error, a hang in NCCL init, a crash after ready, a server that ignores SIGTERM."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from up_helpers import REPLAY, free_port, live_group, server_pid

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.profile.launch import Launch
from kimi_serve.up.console import Console
from kimi_serve.up.options import UpOptions
from kimi_serve.up.run import serve

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")


def replay_launch(scenario: str, port: int, tp: int = 8) -> Launch:
    args = ("--model-path", "/models/Kimi-K2.5", "--tp-size", str(tp), "--host", "127.0.0.1", "--port", str(port))
    return Launch(
        argv=(sys.executable, str(REPLAY), "--scenario", scenario, *args),
        env={},
        server_args=args,
        engine="sglang",
        host="127.0.0.1",
        port=port,
        api_key_file=None,
    )


class Run:
    def __init__(self, code: int | None, error: KimiServeError | None, out: str, err: str, log: str) -> None:
        self.code, self.error, self.out, self.err, self.log = code, error, out, err, log

    @property
    def exit_code(self) -> int:
        return int(self.error.exit_code) if self.error else int(self.code or 0)


def run_replay(tmp_path: Path, scenario: str, *, tp: int = 8, interrupt_on: str | None = None, **opts: float) -> Run:
    out, err = io.StringIO(), io.StringIO()
    log = tmp_path / f"{scenario}.log"
    options = UpOptions(verify=False, tp_size=tp, **{"startup_timeout_s": 120.0, "stop_grace_s": 5.0, **opts})
    stop_timer = None
    if interrupt_on is not None:  # send ourselves SIGINT once `interrupt_on` shows up on the console (a Ctrl-C)

        def watch() -> None:
            while interrupt_on not in out.getvalue():
                if stop.wait(0.1):
                    return
            os.kill(os.getpid(), signal.SIGINT)

        stop = threading.Event()
        stop_timer = threading.Thread(target=watch, daemon=True)
        stop_timer.start()
    code, error = None, None
    try:
        code = serve(replay_launch(scenario, free_port(), tp), options, log, Console(out, err, tty=False))
    except KimiServeError as exc:
        error = exc
    finally:
        if stop_timer is not None:
            stop.set()
    return Run(code, error, out.getvalue(), err.getvalue(), log.read_text(errors="replace"))


def assert_no_orphans(run: Run) -> None:
    assert live_group(server_pid(run.out)) == [], "processes of the server's group survived"


def test_cuda_oom_is_reported_with_its_traceback_and_exit_4(tmp_path: Path) -> None:
    run = run_replay(tmp_path, "cuda_oom")
    assert run.exit_code == ExitCode.SERVER_EXITED
    assert "CUDA out of memory" in run.error.message and "cuda_oom" in run.error.message
    assert "mem_fraction_static" in run.error.hint
    # the diagnosis carries the relevant log lines: the failing rank's traceback down to the exception
    assert "FAILURE in the server log (cuda_oom" in run.err
    assert "| [" in run.err and "TP3] Scheduler hit an exception" in run.err
    assert '|   File "<site-packages>/sglang/srt/mem_cache/memory_pool.py"' in run.err
    assert "killed by SIGKILL (status -9" in run.out  # SGLang's own exit status on a scheduler exception
    assert "[kv_cache]" in run.out and "weights 8/8 shards" in run.out
    assert "Received sigquit" in run.log  # everything the server wrote is in the log file
    assert_no_orphans(run)


def test_nccl_error_is_reported_before_any_weights(tmp_path: Path) -> None:
    run = run_replay(tmp_path, "nccl_error")
    assert run.exit_code == ExitCode.SERVER_EXITED
    assert run.error.message.startswith(
        "server failed (nccl): NCCL / distributed init failed: RuntimeError: NCCL error"
    )
    assert "NCCL_DEBUG=INFO" in run.error.hint
    assert "[weights]" not in run.out and "[init] distributed init" in run.out
    assert_no_orphans(run)


def test_nccl_hang_hits_the_init_deadline_and_kills_the_whole_group(tmp_path: Path) -> None:
    # the replayed ranks ignore SIGTERM and have no PDEATHSIG: only a SIGKILL of the group removes them
    run = run_replay(tmp_path, "nccl_hang", init_timeout_s=2.0, startup_timeout_s=600.0)
    assert run.exit_code == ExitCode.UNREACHABLE
    assert "distributed init hung: no 'Init parallel ends.' from rank(s) 0, 1, 2, 3, 4, 5, 6, 7" in run.error.message
    assert "SIGTERM to pid" in run.out
    assert "killed by SIGTERM" in run.out  # the main process dies on SIGTERM during load (no handler), as SGLang does
    assert_no_orphans(run)


def test_successful_start_shows_phases_then_ctrl_c_stops_cleanly(tmp_path: Path) -> None:
    run = run_replay(tmp_path, "ok", interrupt_on="supervising pid")
    assert run.exit_code == ExitCode.INTERRUPTED, run.err
    phases = [p for p in ("[init]", "[weights]", "[kv_cache]", "[cuda_graph]", "[http]", "[ready]") if p in run.out]
    assert phases == ["[init]", "[weights]", "[kv_cache]", "[cuda_graph]", "[http]", "[ready]"]
    assert "weights 8/8 shards (100%),  7.48s/it" in run.out or "weights 8/8 shards (100%), 7.48s/it" in run.out
    assert "distributed init done on 8 rank(s)" in run.out
    assert "server ready in" in run.out
    assert "Multi-thread loading shards" not in run.out  # tqdm fragments become progress lines, not echoes
    assert "Multi-thread loading shards" in run.log
    assert "SIGINT received" in run.out and "exit status 0" in run.out and "stopped on SIGINT" in run.out
    assert "Draining requests" in run.log
    assert_no_orphans(run)


def test_crash_after_ready_exits_4_with_the_cause(tmp_path: Path) -> None:
    run = run_replay(tmp_path, "crash_after_ready", tp=4)
    assert run.exit_code == ExitCode.SERVER_EXITED
    assert "server ready in" in run.out
    assert "a server subprocess failed" in run.error.message and "status -9" in run.error.message
    assert "crashed with exit code -6" in run.err or "SIGQUIT received" in run.err
    assert_no_orphans(run)


def test_a_dead_servers_last_lines_are_what_it_said_not_the_health_polls_it_answered(tmp_path: Path) -> None:
    """A server killed after ready with nothing in its log to say why (a killed replica): the last lines up shows
    are its own records, not the access lines of the GET /health polls that followed them (the log keeps those)."""
    run = run_replay(tmp_path, "dies_quietly", tp=2)
    assert run.exit_code == ExitCode.SERVER_EXITED and "status -9" in run.error.message, run.err
    shown = run.err.split("last log lines (its GET /health access lines left out):")[1]
    assert "GET /health" not in shown and "The server is fired up and ready to roll!" in shown, run.err
    assert "GET /model_info" in shown  # other requests' access lines stay
    assert run.log.count('"GET /health HTTP/1.1" 200') >= 15
    assert_no_orphans(run)


def test_a_server_that_ignores_sigterm_is_killed_and_reported_unclean(tmp_path: Path) -> None:
    run = run_replay(tmp_path, "stuck_stop", tp=2, interrupt_on="supervising pid", stop_grace_s=1.0)
    assert run.exit_code == ExitCode.SERVER_EXITED
    assert "escalating: SIGKILL to process group" in run.out
    assert run.error.message.startswith("the server did not stop cleanly (killed by SIGKILL")
    assert_no_orphans(run)


def test_a_server_that_cannot_start_is_an_environment_error(tmp_path: Path) -> None:
    launch = Launch(
        argv=(str(tmp_path / "no-such-python"), "-m", "sglang.launch_server"),
        env={},
        server_args=(),
        engine="sglang",
        host="127.0.0.1",
        port=free_port(),
        api_key_file=None,
    )
    with pytest.raises(KimiServeError) as exc:
        serve(launch, UpOptions(verify=False), tmp_path / "x.log", Console(io.StringIO(), io.StringIO(), tty=False))
    assert exc.value.exit_code == ExitCode.ENVIRONMENT and "cannot start" in exc.value.message


@pytest.mark.parametrize(
    "scenario, how", [("oom_stays_alive", "killed by SIGTERM"), ("oom_stays_alive_stuck", "killed by SIGKILL")]
)
def test_a_fatal_failure_from_a_server_that_keeps_running_is_stopped_within_seconds(
    tmp_path: Path, scenario: str, how: str
) -> None:
    # the OOM is logged, then nothing exits: `up` must stop it the SGLang way (SIGTERM to the main pid only, SIGKILL
    # to the group after the grace) and leave no process of the group behind (the replayed ranks ignore SIGTERM)
    started = time.monotonic()
    run = run_replay(tmp_path, scenario, tp=4, failure_grace_s=1.0, stop_grace_s=2.0)
    elapsed = time.monotonic() - started
    assert run.exit_code == ExitCode.SERVER_EXITED
    assert run.error.message.startswith("the server failed (cuda_oom: CUDA out of memory")
    assert run.error.message.endswith("and did not exit; stopped")
    assert "the server did not exit after its failure; stopping the server (SIGTERM to pid" in run.out
    assert how in run.out
    assert_no_orphans(run)
    # start-up replay (~3 s) + failure grace 1 s + stop grace 2 s + reap grace 5 s; generous for a loaded 2-core box
    assert elapsed < 45.0, elapsed


class _IdleServer:
    """STAND-IN for process.child.Server in a clock-driven test of the start deadline: never exits, logs nothing."""

    pid = pgid = 0
    killed = False

    def terminate(self) -> None:
        self.terminated = True


def test_up_never_cuts_short_a_30_minute_healthy_cold_start(tmp_path: Path) -> None:
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.up.watch import Watch

    opts = UpOptions.from_profile(load_profile("prod"), verify=False, health_every_s=1e9)
    assert opts.startup_timeout_s == 1800.0
    server = _IdleServer()
    watch = Watch(
        server,
        replay_launch("ok", free_port()),
        opts,
        Console(io.StringIO(), io.StringIO(), tty=False),
        tmp_path / "x.log",
    )
    watch.next_health = float("inf")  # no /health polls: only the deadline is under test
    for minute in range(30):  # a cold start that is still loading after 0..29.9 minutes: never stopped
        watch._watch_start(watch.started + 60.0 * minute + 59.0)
        assert watch.reason is None, minute
    watch._watch_start(watch.started + 1801.0)
    assert watch.reason is not None and watch.reason.code == ExitCode.UNREACHABLE
    assert "the server was not ready within 1800s" in watch.reason.message


def test_output_stays_closed_once_both_streams_ended(tmp_path: Path) -> None:
    """A server's output ends once (stdout and stderr each reach EOF): asking for lines afterwards returns none and
    keeps it closed. (Counting a second end made `up` wait its whole output grace on every server that exited.)"""
    from kimi_serve.process.child import Server

    server = Server.start([sys.executable, "-c", "print('boom'); raise SystemExit(3)"], {}, tmp_path / "s.log")
    try:
        assert server.reap(10.0) == 3
        seen: list[str] = []
        for _ in range(100):
            seen += [line.text for line in server.lines(0.05)]
            if server.output_closed:
                break
        assert seen == ["boom"] and server.output_closed
        for _ in range(3):
            assert server.lines(0.01) == []
            assert server.output_closed
    finally:
        server.close()


def test_the_contract_verdict_is_one_for_the_server_and_the_router() -> None:
    """`up` stops on a failed contract check with 1 (3 when the server was unreachable), the first finding's message
    and fix, after saying the report's lines: the one server's watch and the router's supervisor both read it here."""
    from kimi_serve.up.watch import contract_verdict
    from kimi_serve.verify.report import ProbeResult, Readiness, VerifyReport, problem

    ready = Readiness(ready=True, phase="ready", waited_s=0.0)
    raw = problem("raw_tool_tokens", "tool-call tokens in content", "start SGLang with --tool-call-parser kimi_k2")
    failed = VerifyReport(
        "http://127.0.0.1:1", "quick", ready, probes=[ProbeResult("tool_call", "stream", 0.1, (raw,))]
    )
    said: list[str] = []
    outcome = contract_verdict(failed, said.append, "contract check through the router failed")
    assert outcome is not None and outcome.code == ExitCode.FAILED
    assert outcome.message == "contract check through the router failed: tool-call tokens in content"
    assert outcome.hint == "start SGLang with --tool-call-parser kimi_k2" and said
    gone = problem("unreachable", "connection refused", "start the server")
    down = VerifyReport("http://127.0.0.1:1", "quick", ready, error=gone, error_unreachable=True)
    outcome = contract_verdict(down, said.append, "contract check failed")
    assert outcome is not None and outcome.code == ExitCode.UNREACHABLE and "connection refused" in outcome.message
    assert contract_verdict(VerifyReport("http://127.0.0.1:1", "quick", ready), said.append, "x") is None
