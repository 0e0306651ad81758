"""SGLang 0.5.23's REAL weight loader, in a real CPU launch_server started by `kimi-serve up`, loading a small real
safetensors checkpoint made here (a 2-layer Llama, ~40 MB in 4 shards) with the loader flags the profile renders
(multithreaded, 2 threads, with checkpoint prefetch). One real start (10-60 s on a 2-core box)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ckpt_helpers import llama_checkpoint
from up_helpers import CPU_DIR, free_port, live_group, nccl_port, server_pid
from up_helpers import UpProcess as Up

from kimi_serve.host import coldstart as cs


def _profile(tmp: Path, model: Path, port: int, python: str) -> Path:
    path = tmp / "real-weights.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        description: real SGLang on CPU loading a real tiny checkpoint (tests only)
        engine: sglang
        python: {python}
        gpus: 1
        patch_set: null
        model:
          path: {model}
          served_name: tiny
          trust_remote_code: true
          attention_heads: 4
        loader:
          multithread: true
          num_threads: 2
          prefetch: true
          prefetch_num_threads: 1
        parallel:
          tp_size: 1
        speculative:
          enabled: false
        allreduce:
          flashinfer_fusion_backend: null
          torch_symm_mem: false
          pcie_ipc: false
        memory:
          mem_fraction_static: 0.5
          chunked_prefill_size: 1024
          cuda_graph_max_bs_decode: 4
        server:
          host: 127.0.0.1
          port: {port}
          enable_metrics: false
        env:
          PYTHONPATH: {CPU_DIR / "stubs"}
        extra_args: [--device, cpu, --skip-tokenizer-init, --max-total-tokens, "4096", --nccl-port, "{nccl_port()}",
                     --sleep-on-idle]
        startup:
          timeout: 300
        service:
          stop_timeout: 30
        """)
    )
    return path


def test_real_loader_loads_with_the_rendered_options_and_phases_are_recorded(
    tmp_path: Path, sglang_python: str, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "tiny-real"
    total = llama_checkpoint(model)
    shards = sorted(model.glob("*.safetensors"))
    for f in shards:
        cs.drop_cache(f)
    state = tmp_path / "state"
    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", str(state))  # in-process `cli` calls and the subprocesses alike
    port = free_port()
    profile = _profile(tmp_path, model, port, sglang_python)

    # the loader keys as SGLang flags, accepted by SGLang's own parser and weight-loader validation
    render = cli("render", "--profile", str(profile), "--json")
    argv = json.loads(render.out)["argv"]
    i = argv.index("--model-loader-extra-config")
    assert json.loads(argv[i + 1]) == {"enable_multithread_load": True, "num_threads": 2}
    assert "--weight-loader-prefetch-checkpoints" in argv
    checked = cli("check", "--profile", str(profile), "--offline")
    assert "weight loader accepts its extra config" in checked.out, checked.out

    doctor = subprocess.run(
        [sys.executable, "-m", "kimi_serve", "doctor", "--profile", str(profile)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert "disk floor" in doctor.stdout and "O_DIRECT" in doctor.stdout, doctor.stdout

    log = tmp_path / "server.log"
    up = Up(["--profile", str(profile), "--no-verify", "--log-file", str(log)], state)
    try:
        assert up.wait_for("supervising pid", 300), up.output[-4000:]
    finally:
        if up.proc.poll() is None:
            up.proc.send_signal(signal.SIGTERM)
        up.proc.wait(90)
        up._reader.join(5)
    out, text = up.output, log.read_text(errors="replace")
    assert live_group(server_pid(out)) == []

    # SGLang's real loader read the real shards, multithreaded although prefetch is on (the explicit keys keep it)
    assert "Multi-thread loading shards: 100% Completed | 4/4" in text, text[-3000:]
    assert "Loading safetensors checkpoint shards" not in text
    assert "'weight_loader_prefetch_checkpoints': True" in text
    assert "type=LlamaForCausalLM" in text
    assert "cold start: " in out and "predicted weight phase" in out, out[-3000:]
    assert "weights 4/4 shards" in out and "disk floor" in out

    starts = json.loads((state / "coldstart" / "starts.json").read_text())
    assert len(starts) == 1
    rec = starts[0]
    assert rec["outcome"] == "serving" and rec["figures"]["checkpoint_bytes"] >= total
    ph = rec["phases"]
    assert ph["weights"] > 0 and ph["init"] is not None and ph["warmup"] is not None
    assert ph["cuda_graph"] is None  # no CUDA graphs on CPU
    assert rec["sglang_load_weight_s"] and rec["sglang_load_weight_s"][0] <= ph["weights"] + 1.0

    status = cli("status", "--root", str(tmp_path / "root"), "--json")
    assert json.loads(status.out)["starts"][-1]["time"] == rec["time"]
    doctor = subprocess.run(
        [sys.executable, "-m", "kimi_serve", "doctor", "--profile", str(profile)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert "last_start" in doctor.stdout and "serving" in doctor.stdout, doctor.stdout
    print(f"\nreal CPU start: phases {ph}, SGLang's load_weight {rec['sglang_load_weight_s']}")


def test_sglangs_own_loader_check_rejects_an_unknown_extra_config_key(sglang_python: str) -> None:
    from kimi_serve.check.sglang_tier import SGLangPython, run_probe
    from kimi_serve.simulator.stand_in import STANDIN_MODEL

    args = [
        "--model-path",
        str(STANDIN_MODEL),
        "--device",
        "cuda",
        "--model-loader-extra-config",
        '{"enable_multithread_load": true, "num_thread": 8}',
    ]  # a typo SGLang's parser lets through
    out = run_probe(SGLangPython(sglang_python, "test"), args, platform="sm120")
    assert out["parse"]["ok"] is True and out["resolve"]["ok"] is True, out
    assert out["loader"]["ok"] is False and "num_thread" in out["loader"]["error"], out
