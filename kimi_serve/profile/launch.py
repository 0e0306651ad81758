"""Profile -> the exact launch: argv and environment, built as data (no I/O), so `render`, `up` and the systemd unit
all start the same thing.

The API key never appears here: a profile names a root-only SGLang config file (`api-key: KEY`), passed as
`--config FILE`, which SGLang merges into its arguments itself (CLI > config > defaults).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from kimi_serve.core.net import host_port
from kimi_serve.core.proc import python_argv
from kimi_serve.core.report import json_meta
from kimi_serve.profile.loader import Profile

ENGINE_MODULES = {"sglang": "sglang.launch_server", "simulator": "kimi_serve.simulator"}

_OMIT = json_meta(omit=True)


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]  # interpreter, -m, module, then server_args
    env: dict[str, str]
    # `render --json` shows the launch as its argv and env (docs/json.md): the rest is read from them
    server_args: tuple[str, ...] = field(metadata=_OMIT)
    engine: str = field(metadata=_OMIT)
    host: str = field(metadata=_OMIT)
    port: int = field(metadata=_OMIT)
    api_key_file: str | None = field(metadata=_OMIT)

    @property
    def endpoint(self) -> str:
        """``HOST:PORT`` as a client names it (``[V6]:PORT`` for an IPv6 host); verify maps 0.0.0.0 to loopback."""
        return host_port(self.host, self.port)

    def shell(self) -> str:
        """One line that runs exactly this launch when pasted into a POSIX shell: ``env K=V ... CMD ARGS``, every
        word shell-quoted (``env`` keeps it working after ``sudo``/``exec`` and with any variable name)."""
        cmd = shlex.join(self.argv)
        if not self.env:
            return cmd
        return "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(self.env.items())) + " " + cmd


def _num(v: float | int) -> str:
    return str(v) if isinstance(v, int) else repr(float(v))


def _flags(*pairs: tuple[str, str | float | None]) -> list[str]:
    """``FLAG VALUE`` for each value given, a bare ``FLAG`` for True; nothing for None or False."""
    a: list[str] = []
    for flag, value in pairs:
        if value is not None and value is not False:
            a += [flag] if value is True else [flag, value if isinstance(value, str) else _num(value)]
    return a


def server_args_of(profile: Profile, port: int | None = None) -> list[str]:
    """The SGLang flags for a profile, full names only, in a stable order. ``port`` replaces server.port (replica i
    of a local replicated deployment listens at server.port + i, :mod:`kimi_serve.profile.topology`)."""
    m, spec, par, ar, mem, srv = (
        profile.model,
        profile.speculative,
        profile.parallel,
        profile.allreduce,
        profile.memory,
        profile.server,
    )
    a = _flags(
        ("--model-path", m.path),
        ("--served-model-name", m.served_name),
        ("--trust-remote-code", m.trust_remote_code),
        ("--context-length", m.context_length),
        ("--kv-cache-dtype", None if m.kv_cache_dtype == "auto" else m.kv_cache_dtype),
        ("--tp-size", par.tp_size),
        ("--pp-size", par.pp_size if par.pp_size > 1 else None),
    )
    a += node_args(profile) + loader_args(profile)
    if spec.enabled:
        a += _flags(
            ("--speculative-algorithm", spec.algorithm),
            ("--speculative-draft-model-path", spec.draft_model_path or None),
            ("--speculative-num-steps", spec.num_steps),
            ("--speculative-eagle-topk", spec.eagle_topk),
            ("--speculative-num-draft-tokens", spec.num_draft_tokens),
            ("--disable-overlap-schedule", not spec.overlap_schedule),
        )
    parsers = profile.parsers
    a += _flags(("--tool-call-parser", parsers.tool_call or None), ("--reasoning-parser", parsers.reasoning or None))
    a += model_defaults_args(profile)
    a += _flags(
        ("--flashinfer-allreduce-fusion-backend", ar.flashinfer_fusion_backend or None),
        ("--enable-torch-symm-mem", ar.torch_symm_mem),
        ("--enable-symm-mem", ar.nccl_symm_mem),
        ("--mem-fraction-static", mem.mem_fraction_static),
        ("--chunked-prefill-size", mem.chunked_prefill_size),
        ("--max-running-requests", mem.max_running_requests),
        ("--cuda-graph-max-bs-decode", mem.cuda_graph_max_bs_decode),
        ("--host", srv.host),
        ("--port", srv.port if port is None else port),
        ("--log-level", srv.log_level),
        ("--enable-metrics", srv.enable_metrics),
        ("--watchdog-timeout", srv.watchdog_timeout),
        ("--config", srv.api_key_file or None),
    )
    return a + list(profile.extra_args)


def model_defaults_args(profile: Profile) -> list[str]:
    """The server-wide defaults a request may override (docs/families.md), each as compact JSON; nothing for the keys
    left null."""
    m = profile.model
    a: list[str] = []
    for flag, keys in (
        ("--default-chat-template-kwargs", ("thinking", "preserve_thinking")),
        ("--preferred-sampling-params", ("temperature", "top_p")),
    ):
        values = {k: getattr(m, k) for k in keys if getattr(m, k) is not None}
        if values:
            a += [flag, json.dumps(values, separators=(",", ":"))]
    return a


def node_args(profile: Profile) -> list[str]:
    """Multi-node tensor parallelism (``nodes:``): ``--nnodes N --node-rank R --dist-init-addr HOST:PORT``; nothing
    on a single host. A missing leader_host passes SGLang's own validation, so :mod:`kimi_serve.check.rules` fails
    it."""
    n = profile.nodes
    if n.count <= 1:
        return []
    a = ["--nnodes", str(n.count), "--node-rank", str(n.rank)]
    if n.leader_host:
        a += ["--dist-init-addr", host_port(n.leader_host, n.leader_port)]
    return a


def loader_args(profile: Profile) -> list[str]:
    """The weight-loader flags of the ``loader:`` section (docs/coldstart.md)."""
    ld = profile.loader
    extra = {
        k: v for k, v in (("enable_multithread_load", ld.multithread), ("num_threads", ld.num_threads)) if v is not None
    }
    a = ["--model-loader-extra-config", json.dumps(extra, separators=(",", ":"), sort_keys=True)] if extra else []
    threads = ld.prefetch_num_threads
    return a + _flags(
        ("--weight-loader-prefetch-checkpoints", ld.prefetch), ("--weight-loader-prefetch-num-threads", threads)
    )


def interpreter_of(profile: Profile, *, sglang_python: str | None, fallback: str) -> str:
    """``python:`` if set; for the simulator, else ``sglang_python`` (the SGLang interpreter the settings name); else
    ``fallback`` (the interpreter running kimi-serve)."""
    if profile.python:
        return str(profile.python)
    if profile.engine == "simulator" and sglang_python:
        return sglang_python
    return fallback


def build_launch(
    profile: Profile, interpreter: str, pythonpath: str | None = None, *, port: int | None = None
) -> Launch:
    """The launch for a profile, run by ``interpreter`` (:func:`interpreter_of`). Pure; validation is
    :mod:`kimi_serve.check.report`'s job. ``pythonpath`` (the folder holding kimi_serve) goes in front of the
    simulator's PYTHONPATH: the SGLang interpreter does not have kimi_serve installed."""
    server_args = server_args_of(profile, port)
    module = ENGINE_MODULES[profile.engine]
    argv = (*python_argv(interpreter, "-m", module), *server_args)
    env = dict(profile.env)
    if profile.allreduce.pcie_ipc:
        env.setdefault("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1")
    if profile.engine == "simulator" and pythonpath:
        from kimi_serve.core.settings import with_pythonpath

        env = with_pythonpath(env, pythonpath)
    return Launch(
        argv=argv,
        env=env,
        server_args=tuple(server_args),
        engine=profile.engine,
        host=profile.server.host,
        port=profile.server.port if port is None else port,
        api_key_file=profile.server.api_key_file,
    )
