"""The start-up log reader on SGLang 0.5.23 log shapes (docs/sglang-startup-log.md and a real CPU run's lines)."""

from __future__ import annotations

from kimi_serve.process.startup_log import StartupTracker, is_progress_bar, split_stream


def feed(tracker: StartupTracker, text: str) -> list:
    lines, tail = split_stream(text)
    events = [ev for line in [*lines, tail] if line.strip() for ev in tracker.feed(line)]
    return events + tracker.flush()


# Lines as a real CPU start printed them (tests/test_up_sglang.py produces them live), noise included.
REAL_CPU_START = """\
/venv/lib/python3.11/site-packages/sglang/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.
  warnings.warn(
[2026-11-29 09:27:01] Fail to set RLIMIT_NOFILE: current limit exceeds maximum limit
[2026-11-29 09:27:01] server_args={'model_path': 'tiny-llama'}
[2026-11-29 09:27:42] Init parallel begin.
[2026-11-29 09:27:42] Init parallel ends. elapsed=0.03 s
[2026-11-29 09:27:43] Ignore import error when loading sglang.srt.models.inkling: No module named 'cutlass'
[2026-11-29 09:27:44] Load weight begin. avail mem=20.65 GB
[2026-11-29 09:27:44] Load weight end. elapsed=0.02 s, type=LlamaForCausalLM, avail mem=20.65 GB, mem usage=0.00 GB.
[2026-11-29 09:27:44] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, K size: 0.00 GB, V size: 0.00 GB
[2026-11-29 09:27:44] max_total_num_tokens=4096, chunked_prefill_size=4096, available_cpu_mem=20.62 GB
[2026-11-29 09:27:44] INFO:     Uvicorn running on http://127.0.0.1:30177 (Press CTRL+C to quit)
[2026-11-29 09:27:45] INFO:     127.0.0.1:52588 - "GET /model_info HTTP/1.1" 200 OK
[2026-11-29 09:27:46] The server is fired up and ready to roll!
"""


def test_real_cpu_start_walks_the_phases_without_a_failure() -> None:
    t = StartupTracker()
    events = feed(t, REAL_CPU_START)
    assert [e.phase for e in events if e.kind == "phase"] == ["init", "weights", "kv_cache", "http", "warmup", "ready"]
    assert t.failure is None
    assert t.progress.kv_tokens == 4096 and t.progress.url == "http://127.0.0.1:30177"
    assert any(e.kind == "init_done" for e in events)
    assert [e.text for e in events if e.kind == "weights_done"] == [
        "target weights loaded in 0.02 s (LlamaForCausalLM)"
    ]


def test_tp8_shard_bar_gives_progress_rate_and_eta_and_counts_ranks() -> None:
    t = StartupTracker(tp_size=8)
    text = "".join(f"[2026-05-01 10:00:21 TP{r}] Init parallel begin.\n" for r in range(8))
    text += "".join(f"[2026-05-01 10:00:25 TP{r}] Init parallel ends. elapsed=3.91 s\n" for r in range(7))
    events = feed(t, text)
    assert not any(e.kind == "init_done" for e in events)  # TP7 is missing
    assert t.progress.ranks_in_init == set(range(8)) and t.progress.ranks_init_done == set(range(7))
    events = feed(t, "[2026-05-01 10:00:25 TP7] Init parallel ends. elapsed=3.91 s\n")
    assert [e.text for e in events] == ["distributed init done on 8 rank(s) (3.91 s)"]
    bar = (
        "\rMulti-thread loading shards:   0% Completed | 0/64 [00:00<?, ?it/s]"
        "\rMulti-thread loading shards:  12% Completed | 8/64 [01:02<07:15,  7.78s/it]"
        "[2026-05-01 10:01:02 TP3] Memory baseline taken. mem usage=1.12 GB\n"
    )  # another rank glued to the bar
    events = feed(t, bar)
    shards = [e for e in events if e.kind == "shards"]
    assert shards[-1].text == "weights 8/64 shards (12%), 7.78s/it, ETA 07:15"
    assert (shards[-1].done, shards[-1].total) == (8, 64)
    assert is_progress_bar("Multi-thread loading shards: 100% Completed | 64/64 [07:58<00:00,  7.48s/it]")


def test_cuda_oom_traceback_is_one_failure_with_its_lines() -> None:
    t = StartupTracker(tp_size=8)
    feed(
        t,
        "[2026-05-01 10:08:37 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 687584, KV size: 45.00 GB\n"
        "[2026-05-01 10:08:37 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "sglang/srt/mem_cache/memory_pool.py", line 4865, in _create_buffers\n'
        "    torch.zeros(\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 755.00 MiB. GPU 3 has a total capacity\n"
        "\n"
        "[2026-05-01 10:08:37] Received sigquit from a child process. It usually means the child failed.\n",
    )
    f = t.failure
    assert f is not None and f.kind == "cuda_oom"
    assert f.summary.startswith("CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory. Tried")
    assert f.lines[0].endswith("TP3] Scheduler hit an exception: Traceback (most recent call last):")
    assert f.lines[-1].startswith("torch.OutOfMemoryError")


def test_nccl_rendezvous_timeout_and_port_in_use_are_named() -> None:
    t = StartupTracker()
    feed(
        t,
        "[2026-05-01 10:10:22 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "parallel_state.py", line 2517, in init_distributed_environment\n'
        "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 7/8 clients joined.\n",
    )
    assert t.failure is not None and t.failure.kind == "nccl"
    t = StartupTracker()
    feed(
        t,
        "[2026-05-01 10:10:32] ERROR:    [Errno 98] error while attempting to bind on address "
        "('0.0.0.0', 30000): address already in use\n",
    )
    assert t.failure is not None and t.failure.kind == "port_in_use"
    assert "server.port" in t.failure.fix


def test_a_traceback_cut_by_the_end_of_the_stream_is_still_reported() -> None:
    t = StartupTracker()
    t.feed("Traceback (most recent call last):")
    t.feed('  File "/venv/sglang/launch_server.py", line 80, in <module>')
    assert t.failure is None
    events = t.flush()
    assert t.failure is not None and t.failure.kind == "traceback" and events[0].kind == "failure"


def test_a_new_record_closes_an_open_traceback() -> None:
    t = StartupTracker()
    feed(
        t,
        "[2026-05-01 10:00:03] Initialization failed. warmup error: Traceback (most recent call last):\n"
        '  File "http_server.py", line 2380, in _wait_and_warmup\n'
        "[2026-05-01 10:00:04] kill_process_tree called: parent_pid=1, include_parent=True, pid=1\n",
    )
    assert t.failure is not None and t.failure.kind == "warmup_failed"
    assert len(t.failure.lines) == 2
