"""Rules of this deployment (Kimi-K2.5 INT4, TP8, EAGLE-3, SM120, PCIe): the fast layers `render` and `check` run.
A failing rule names the profile key (file:line) and the fix; the flag table is :mod:`kimi_serve.profile.flags`.
"""

from __future__ import annotations

from collections.abc import Iterator

from kimi_serve.check.auth_rules import rule_admin_key, rule_auth
from kimi_serve.check.family_rules import FAMILY_RULES
from kimi_serve.check.owned_paths import rule_owned_paths
from kimi_serve.check.patch_rules import rule_patch_set, rule_patch_set_redact
from kimi_serve.check.rule_kit import Rule, bad, ok
from kimi_serve.check.topology_rules import TOPOLOGY_RULES
from kimi_serve.core.findings import FAIL, PASS, WARN, Finding
from kimi_serve.profile.flags import check_argv, load_flag_table, unknown_sglang_env
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile

PCIE_IPC_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"


# Each parser: its key, its name (--NAME-parser), what it gives clients, and what they get without it.
_PARSERS = (
    (
        "tool_call",
        "tool-call",
        "tool calls come back as structured tool_calls",
        "clients get raw <|tool_calls_section_begin|> text instead of tool_calls",
    ),
    ("reasoning", "reasoning", "reasoning comes back as reasoning_content", "reasoning and </think> end up in content"),
)


def rule_parsers(p: Profile, _: Launch) -> Iterator[Finding]:
    for key, kind, good, lost in _PARSERS:
        value, flag = getattr(p.parsers, key), f"--{kind}-parser"
        if value == "kimi_k2":
            yield ok(f"parsers.{key}", f"{kind} parser kimi_k2: {good}")
            continue
        running = f"{kind} parser is {value!r}, not kimi_k2"
        if not value:
            running = f"no {kind} parser is set (SGLang runs without {flag})"
        fix = f"set parsers.{key}: kimi_k2, which launches SGLang with {flag} kimi_k2"
        yield bad(p, f"parsers.{key}", f"{running}: {lost}", fix)


def rule_model(p: Profile, _: Launch) -> Iterator[Finding]:
    if not p.model.trust_remote_code:
        yield bad(
            p,
            "model.trust_remote_code",
            "Kimi-K2.5's tokenizer and config need --trust-remote-code",
            "set model.trust_remote_code: true",
        )
    else:
        yield ok("model.trust_remote_code", "--trust-remote-code is set")
    if ":" in p.model.served_name:
        yield bad(
            p,
            "model.served_name",
            f"served name {p.model.served_name!r} contains ':' (SGLang rejects it)",
            "remove the ':'",
        )
    elif not p.model.served_name.isprintable():  # a control character, a lone surrogate (category Cs)
        yield bad(
            p,
            "model.served_name",
            f"served name {p.model.served_name!r} holds a control character or a lone surrogate (not text a client "
            "can send back)",
            "write the name as printable Unicode text",
        )


def rule_parallel(p: Profile, _: Launch) -> Iterator[Finding]:
    """One rank per GPU on every host: tp_size x pp_size = gpus x nodes.count (SGLang itself only asserts that
    tp_size x pp_size divides by nnodes, :mod:`kimi_serve.check.topology_rules`)."""
    tp, pp, nodes = p.parallel.tp_size, p.parallel.pp_size, p.nodes.count
    if nodes == 1 and pp == 1 and tp != p.gpus:
        yield bad(
            p,
            "parallel.tp_size",
            f"tp_size {tp} differs from gpus {p.gpus}",
            f"set parallel.tp_size: {p.gpus} (one rank per GPU) or change gpus",
        )
    elif tp * pp != p.gpus * nodes:
        want = p.gpus * nodes // pp if (p.gpus * nodes) % pp == 0 else 0
        fix = (
            f"set parallel.tp_size: {want}"
            if want and not p.model.attention_heads % want
            else "make tp_size x pp_size equal gpus x nodes.count, with a tp_size that divides the "
            f"{p.model.attention_heads} attention heads"
        )
        sglang = " (and SGLang asserts 'tp_size must be divisible by number of nodes')" if (tp * pp) % nodes else ""
        yield bad(
            p,
            "parallel.tp_size",
            f"tp_size {tp} x pp_size {pp} = {tp * pp} ranks, but gpus {p.gpus} x "
            f"nodes.count {nodes} = {p.gpus * nodes} GPUs (one rank per GPU on every host){sglang}",
            fix,
        )
    elif p.model.attention_heads % tp:
        yield bad(
            p,
            "parallel.tp_size",
            f"tp_size {tp} does not divide the model's {p.model.attention_heads} attention heads",
            "use a divisor such as 8",
        )
    else:
        shape = f"TP={tp}" + (f" x PP={pp}" if pp > 1 else "")
        hosts = f"{p.gpus} GPUs" + (f" x {nodes} nodes" if nodes > 1 else "")
        yield ok("parallel.tp_size", f"{shape} on {hosts} divides {p.model.attention_heads} heads")


def rule_speculative(p: Profile, launch: Launch) -> Iterator[Finding]:
    s = p.speculative
    if not s.enabled:
        yield ok("speculative", "speculative decoding off")
        return
    if not s.draft_model_path:
        yield bad(
            p,
            "speculative.draft_model_path",
            "EAGLE-3 needs a draft model",
            "set speculative.draft_model_path to the local EAGLE-3 draft directory",
        )
    if s.eagle_topk == 1 and s.num_draft_tokens != s.num_steps + 1:
        yield bad(
            p,
            "speculative.num_draft_tokens",
            f"with eagle_topk 1, num_draft_tokens must be num_steps + 1 = {s.num_steps + 1}, got "
            f"{s.num_draft_tokens} (SGLang would silently rewrite it)",
            f"set speculative.num_draft_tokens: {s.num_steps + 1}",
        )
    if s.overlap_schedule and s.eagle_topk != 1:
        yield bad(
            p,
            "speculative.eagle_topk",
            f"overlap (spec v2) scheduling here needs eagle_topk 1, got {s.eagle_topk}",
            "set speculative.eagle_topk: 1, or overlap_schedule: false",
        )
    if s.overlap_schedule and "--disable-overlap-schedule" in p.extra_args:
        yield bad(
            p,
            "extra_args",
            "--disable-overlap-schedule contradicts speculative.overlap_schedule: true",
            "remove it from extra_args, or set speculative.overlap_schedule: false",
        )
    yield ok(
        "speculative",
        f"{s.algorithm} steps={s.num_steps} topk={s.eagle_topk} draft={s.num_draft_tokens}"
        f" overlap={'on (spec v2)' if s.overlap_schedule else 'off'}",
    )


def rule_allreduce(p: Profile, launch: Launch) -> Iterator[Finding]:
    env_value = p.env.get(PCIE_IPC_ENV)
    pcie_ipc = launch.env.get(PCIE_IPC_ENV) == "1"
    if p.allreduce.pcie_ipc and env_value is not None and str(env_value) != "1":
        yield bad(
            p,
            "env",
            f"env {PCIE_IPC_ENV}={env_value} contradicts allreduce.pcie_ipc: true (the env wins: "
            "the PCIe-IPC all-reduce would be off)",
            f"remove {PCIE_IPC_ENV} from env, or set allreduce.pcie_ipc: false",
        )
    elif not p.allreduce.pcie_ipc and pcie_ipc:
        yield bad(
            p,
            "env",
            f"env {PCIE_IPC_ENV}=1 turns on the PCIe-IPC all-reduce that allreduce.pcie_ipc: false says is off",
            f"set allreduce.pcie_ipc: true and remove {PCIE_IPC_ENV} from env",
            status=WARN,
        )
    elif p.allreduce.nccl_symm_mem and pcie_ipc:
        yield bad(
            p,
            "allreduce.nccl_symm_mem",
            "NCCL symmetric memory takes precedence and bypasses the PCIe-IPC all-reduce",
            "set allreduce.nccl_symm_mem: false (PCIe-IPC is the fast path without NVLink)",
            status=WARN,
        )
    else:
        yield ok("allreduce", "all-reduce path consistent")


def rule_memory(p: Profile, _: Launch) -> Iterator[Finding]:
    implicit = [
        k
        for k in ("mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs_decode")
        if getattr(p.memory, k) is None
    ]
    if implicit:
        yield bad(
            p,
            f"memory.{implicit[0]}",
            f"{', '.join(implicit)} left to SGLang's auto-sizing",
            "set explicit memory knobs for a reproducible deployment",
            status=WARN,
        )
    else:
        yield ok("memory", "memory and CUDA-graph knobs explicit")


LOADER_FLAGS = (
    "--model-loader-extra-config",
    "--weight-loader-prefetch-checkpoints",
    "--weight-loader-prefetch-num-threads",
)


def rule_loader(p: Profile, _: Launch) -> Iterator[Finding]:
    ld = p.loader
    dup = [f for f in LOADER_FLAGS if f in p.extra_args]
    if dup:
        yield bad(
            p,
            "extra_args",
            f"{dup[0]} in extra_args: the loader: section renders it (argparse would keep whichever comes last)",
            "set loader.multithread / num_threads / prefetch instead",
        )
    elif ld.multithread is False and ld.num_threads is not None:
        yield bad(
            p,
            "loader.num_threads",
            "loader.num_threads is ignored with loader.multithread: false",
            "drop num_threads or set multithread: true",
            status=WARN,
        )
    elif ld.prefetch and ld.multithread is None and ld.num_threads is None:
        yield bad(
            p,
            "loader.prefetch",
            "with loader.prefetch and neither multithread nor num_threads set, SGLang loads single-threaded",
            "set loader.multithread: true on local NVMe (docs/coldstart.md)",
            status=WARN,
        )
    else:
        yield ok("loader", "weight-loader options consistent")


def rule_flag_table(p: Profile, launch: Launch) -> Iterator[Finding]:
    table = load_flag_table()
    problems = check_argv(launch.server_args, table)
    for prob in problems:
        where = p.where("extra_args") if prob.flag in p.extra_args else ""
        yield Finding("flags", f"flag {prob.flag}", FAIL, f"{prob.flag}: {prob.message}", prob.fix, where)
    if not problems:
        n = sum(a.startswith("--") for a in launch.server_args)
        yield Finding("flags", "argv", PASS, f"all {n} flags are full, current SGLang {table.sglang_version} flags")
    unknown = unknown_sglang_env(list(launch.env), table)
    for name in unknown:
        hint = "remove it or fix its spelling"
        if name == "SGLANG_ENABLE_SPEC_V2":
            hint = "spec v2 is the default EAGLE-3 worker in 0.5.23; remove it"
        said = f"{name} is unknown to SGLang {table.sglang_version} (it would be silently ignored)"
        where = p.where(f"env.{name}") if f"env.{name}" in p.lines else p.where("env")
        yield Finding("flags", f"env {name}", FAIL, said, hint, where)
    if not unknown:
        yield Finding("flags", "env", PASS, "every SGLANG_* variable is known to SGLang")


RULES: tuple[Rule, ...] = (
    rule_parsers,
    rule_model,
    *FAMILY_RULES,
    rule_parallel,
    rule_speculative,
    rule_patch_set,
    rule_patch_set_redact,
    rule_allreduce,
    rule_auth,
    rule_admin_key,
    rule_memory,
    rule_loader,
    rule_flag_table,
    rule_owned_paths,
    *TOPOLOGY_RULES,
)


def run_rules(profile: Profile, launch: Launch) -> list[Finding]:
    return [f for rule in RULES for f in rule(profile, launch)]
