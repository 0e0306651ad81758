"""The profile keys of what is served and how SGLang is launched for it: the model and its family, the loader,
parallelism and nodes, speculative decoding, the parsers, all-reduce, memory, the server and the router (one part of
:data:`kimi_serve.profile.schema.SECTIONS`)."""

from __future__ import annotations

from kimi_serve.core.family import DEFAULT as DEFAULT_FAMILY
from kimi_serve.core.family import NAMES as FAMILY_NAMES
from kimi_serve.profile.key import Key

SERVING: dict[str, dict[str, Key]] = {
    "": {
        "description": Key("str", "One line saying what this profile is for.", default="", nullable=True),
        "engine": Key(
            "str",
            "What `up` and the systemd unit start: `sglang` (python -m sglang.launch_server) or `simulator` "
            "(SGLang's own serving layer with a scripted Kimi-K2.5, for CI and demos; same argv).",
            default="sglang",
            choices=("sglang", "simulator"),
        ),
        "python": Key(
            "path",
            "Absolute path of the Python that has SGLang installed (systemd's PATH is not the shell's). "
            "Default: the interpreter running kimi-serve.",
        ),
        "gpus": Key(
            "int",
            "GPUs this deployment uses on each host; parallel.tp_size x parallel.pp_size must equal "
            "gpus x nodes.count.",
            default=8,
            min=1,
            max=64,
        ),
        "patch_set": Key(
            "names",
            "The SGLang source patch sets this profile needs (patches/NAME): one name or a list, applied together "
            "all-or-nothing; null or [] when it needs none.",
            default=[],
            nullable=True,
        ),
        "env": Key(
            "str_map",
            "Extra environment for the server (NCCL tuning, SGLANG_* switches). Keys must be "
            "valid names; SGLANG_* names unknown to the target SGLang are errors.",
            default={},
            nullable=True,
        ),
        "extra_args": Key(
            "str_list",
            "Further SGLang flags, appended verbatim after the generated ones; each is "
            "checked against SGLang's own parser (full names only).",
            default=[],
            nullable=True,
        ),
        "replicas": Key(
            "int",
            "Independent copies of the server (each a full TP group) behind SGLang's router "
            "(`router:`, docs/scale-out.md). 1: no router.",
            default=1,
            min=1,
            max=64,
        ),
        "allow_unauthenticated": Key(
            "bool",
            "Allow binding a non-loopback host without an API key (not recommended).",
            default=False,
        ),
    },
    "model": {
        "family": Key(
            "str",
            "Which Kimi model this profile serves (docs/families.md): its parsers, stop ids, thinking switches, "
            "sampling and drafts; checked against the checkpoint's config.json where present. kimi-k3 is refused "
            "(it does not fit 8 GPUs).",
            default=DEFAULT_FAMILY,
            choices=FAMILY_NAMES,
        ),
        "path": Key(
            "path",
            "Directory of the checkpoint (config.json, safetensors shards, tokenizer).",
            required=True,
        ),
        "served_name": Key(
            "str",
            "Model id clients send and /v1/models returns (printable text, no ':').",
            required=True,
        ),
        "trust_remote_code": Key(
            "bool", "Pass --trust-remote-code (Kimi's tokenizer needs it; required).", default=True
        ),
        "context_length": Key("int", "Maximum context length in tokens (null: the model's).", min=1024, max=1_048_576),
        "kv_cache_dtype": Key(
            "str",
            "KV cache data type.",
            default="auto",
            choices=("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"),
        ),
        "attention_heads": Key(
            "int",
            "The model's attention heads; tp_size must divide it (Kimi-K2.5: 64).",
            default=64,
            min=1,
        ),
        "thinking": Key(
            "bool",
            "The server's default thinking mode, for requests that do not say (`thinking` in "
            "--default-chat-template-kwargs); false: instant mode. null: the model's own (thinking on). "
            "Kimi-K2.7-Code only thinks: false is refused.",
        ),
        "preserve_thinking": Key(
            "bool",
            "Kimi-K2.6 and K2.7-Code: earlier assistant turns keep their reasoning in the prompt (`preserve_thinking` "
            "in --default-chat-template-kwargs). null: the model's own (K2.6 off, K2.7-Code on). Refused on K2.5 "
            "(its template has no such switch) and false on K2.7-Code.",
        ),
        "temperature": Key(
            "float",
            "Default sampling temperature for requests that do not set one (--preferred-sampling-params). "
            "null: SGLang's. K2.7-Code's vendor accepts only 1.0.",
            min=0,
            max=2,
        ),
        "top_p": Key(
            "float",
            "Default top_p for requests that do not set one (--preferred-sampling-params). null: SGLang's. "
            "K2.7-Code's vendor accepts only 0.95.",
            min=0,
            max=1,
        ),
    },
    "loader": {
        "multithread": Key(
            "bool",
            "Multithreaded safetensors loading (`enable_multithread_load` in "
            "--model-loader-extra-config). null: SGLang's default (on, but off when prefetch is on "
            "and neither this nor num_threads is set).",
        ),
        "num_threads": Key(
            "int",
            "Loader threads per rank (`num_threads` in --model-loader-extra-config; SGLang's "
            "default 8). Setting it also keeps multithreading on with prefetch.",
            min=1,
            max=128,
        ),
        "prefetch": Key(
            "bool",
            "Read the shards into the page cache in the background while loading, each rank a "
            "share of them (--weight-loader-prefetch-checkpoints).",
            default=False,
        ),
        "prefetch_num_threads": Key(
            "int",
            "Prefetch threads per rank (--weight-loader-prefetch-num-threads; SGLang's default 4).",
            min=1,
            max=64,
        ),
    },
    "parallel": {
        "tp_size": Key("int", "Tensor parallel size (one rank per GPU).", default=8, min=1, max=64),
        "pp_size": Key(
            "int",
            "Pipeline parallel stages (--pp-size; 1: none). Across nodes, PP sends activations once "
            "per stage boundary instead of TP's all-reduces every layer; SGLang 0.5.23 rejects it with "
            "EAGLE-3 (docs/scale-out.md).",
            default=1,
            min=1,
            max=16,
        ),
    },
    "nodes": {
        "count": Key(
            "int",
            "Hosts one server spans (multi-node tensor parallelism: --nnodes); parallel.tp_size is "
            "then gpus x count. 1: a single host.",
            default=1,
            min=1,
            max=16,
        ),
        "rank": Key(
            "int",
            "This host's rank (--node-rank): 0 serves the API, ranks >= 1 only join it. `render "
            "--node-rank R` renders another host's view.",
            default=0,
            min=0,
            max=15,
        ),
        "leader_host": Key(
            "str",
            "Address of the rank-0 host that the other ranks reach (the host part of "
            "--dist-init-addr); required when count > 1.",
        ),
        "leader_port": Key(
            "int",
            "Port of rank 0's torch.distributed rendezvous (--dist-init-addr HOST:PORT).",
            default=20000,
            min=1,
            max=65535,
        ),
    },
    "speculative": {
        "enabled": Key("bool", "Use speculative decoding (EAGLE-3).", default=False),
        "algorithm": Key("str", "Speculative algorithm.", default="EAGLE3", choices=("EAGLE3", "EAGLE")),
        "draft_model_path": Key(
            "path", "Directory of the EAGLE-3 draft model (e.g. a local copy of lightseekorg/kimi-k2.5-eagle3-mla)."
        ),
        "num_steps": Key("int", "Draft steps per verify.", default=3, min=1, max=16),
        "eagle_topk": Key(
            "int",
            "Draft branching; 1 = chain (required for overlap/spec v2 here).",
            default=1,
            min=1,
            max=16,
        ),
        "num_draft_tokens": Key(
            "int",
            "Tokens verified per step; with topk=1 it must be num_steps + 1.",
            default=4,
            min=2,
            max=64,
        ),
        "accept_floor": Key(
            "float",
            "The draft's expected mean accept length (tokens per verify step): verify warns below it "
            "(draft_below_floor) and fails at 1.2 or less whatever it is (draft_dead). Default: the low end of the "
            "2.3-3.8 published for Kimi-K2.5's EAGLE-3 drafts; null: no floor.",
            default=2.3,
            min=1.0,
            max=17.0,
            nullable=True,
        ),
        "overlap_schedule": Key(
            "bool",
            'Overlap ("spec v2") scheduling. In SGLang 0.5.23 spec v2 is the only EAGLE-3 worker and overlap is '
            "on by default; false adds --disable-overlap-schedule.",
            default=True,
        ),
    },
    "parsers": {
        "tool_call": Key(
            "str",
            "--tool-call-parser. Must be kimi_k2 (else tool calls come back as raw tokens).",
            default="kimi_k2",
            nullable=True,
        ),
        "reasoning": Key(
            "str",
            "--reasoning-parser. Must be kimi_k2 (else reasoning lands in content).",
            default="kimi_k2",
            nullable=True,
        ),
    },
    "allreduce": {
        "flashinfer_fusion_backend": Key(
            "str",
            "FlashInfer allreduce+RMSNorm fusion backend (--flashinfer-allreduce-fusion-backend); needs the "
            "SM120 patch set on this hardware. null disables it.",
            choices=("auto", "trtllm", "mnnvl", "cutedsl"),
        ),
        "torch_symm_mem": Key(
            "bool",
            "Torch symmetric-memory all-reduce (--enable-torch-symm-mem); needs the SM120 patch set.",
            default=False,
        ),
        "nccl_symm_mem": Key(
            "bool",
            "NCCL symmetric memory (--enable-symm-mem). It takes precedence over the PCIe-IPC all-reduce.",
            default=False,
        ),
        "pcie_ipc": Key(
            "bool",
            "FlashInfer PCIe-IPC all-reduce for PCIe-only multi-GPU (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1).",
            default=False,
        ),
    },
    "memory": {
        "mem_fraction_static": Key("float", "Fraction of GPU memory for weights and KV cache.", min=0.1, max=0.98),
        "chunked_prefill_size": Key(
            "int", "Chunked prefill size in tokens (-1 disables chunking).", min=-1, max=1_048_576
        ),
        "max_running_requests": Key(
            "int", "Concurrent requests (SGLang forces 48 with speculative decoding if unset).", min=1, max=4096
        ),
        "cuda_graph_max_bs_decode": Key(
            "int", "Largest decode batch captured in a CUDA graph (--cuda-graph-max-bs-decode).", min=1, max=4096
        ),
    },
    "server": {
        "host": Key("str", "Address to bind.", default="127.0.0.1"),
        "port": Key("int", "HTTP port.", default=30000, min=1, max=65535),
        "api_key_file": Key(
            "path",
            "Root-only (0600) YAML file `api-key: KEY`, passed to SGLang as --config FILE so the key is "
            "never on a command line or in the unit. Owned by service.user, so under /etc only in /etc/kimi-serve/ "
            "(the same places as service.working_directory are refused).",
        ),
        "admin_key": Key(
            "str",
            "Whether server.api_key_file must also hold a distinct `admin-api-key` (SGLang then refuses the "
            "clients' key on its ADMIN_OPTIONAL endpoints: weight updates, LoRA, pause, profiling, ...). `auto`: "
            "required when the profile has a key file and binds a non-loopback host; `none` on such a host fails "
            "`check`.",
            default="auto",
            choices=("auto", "required", "none"),
        ),
        "log_level": Key(
            "str",
            "SGLang log level.",
            default="info",
            choices=("debug", "info", "warning", "error", "critical"),
        ),
        "enable_metrics": Key("bool", "Expose Prometheus /metrics.", default=True),
        "watchdog_timeout": Key("float", "Seconds a scheduler step may hang before SGLang aborts.", min=10, max=86400),
    },
    "router": {
        "policy": Key(
            "str",
            "SGLang router policy (--policy): cache_aware sends a prompt to the replica holding its prefix.",
            default="cache_aware",
            choices=("cache_aware", "round_robin", "random", "power_of_two"),
        ),
        "host": Key("str", "Address the router binds (the deployment's front door).", default="127.0.0.1"),
        "port": Key(
            "int",
            "Router HTTP port (clients and `verify` talk to it).",
            default=30000,
            min=1,
            max=65535,
        ),
        "workers": Key(
            "str_list",
            "Replica addresses HOST:PORT the router sends to, one per replica. Empty: the "
            "replicas run on this host at server.port, server.port + 1, ...",
            default=[],
        ),
        "health_check_interval": Key(
            "int",
            "Seconds between the router's worker health checks (its own default, "
            "60, keeps a dead replica 'healthy' for minutes).",
            default=5,
            min=1,
            max=3600,
        ),
        "health_failure_threshold": Key(
            "int",
            "Failed health checks before the router stops sending to a replica.",
            default=2,
            min=1,
            max=100,
        ),
        "metrics_host": Key(
            "str",
            "Address of the router's Prometheus endpoint (its own default is 0.0.0.0).",
            default="127.0.0.1",
        ),
        "metrics_port": Key("int", "Port of the router's Prometheus endpoint.", default=29000, min=1, max=65535),
    },
}
