"""The slow layer of `check`: SGLang's own parser and resolution, run in an interpreter that has SGLang. The argv is
passed as rendered but for named stand-ins where a CI machine differs from the GPU host: bundled config-only model and
draft for missing directories, a copy of the key file (a throwaway when absent), `--device cuda` and simulated SM120.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimi_serve.core import proc, settings
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding
from kimi_serve.core.keyfile import write_key_file, write_key_file_text
from kimi_serve.core.resources import package_root
from kimi_serve.core.settings import process_environ, with_pythonpath
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.sglang.probe import mount_namespace
from kimi_serve.sglang.site import BUILD_HINT, SGLangPython, find_sglang_python
from kimi_serve.simulator.stand_in import STANDIN_DRAFT, STANDIN_MODEL

PROBE_TIMEOUT_S = 300


def _adapt(server_args: tuple[str, ...], secret_file: Path) -> tuple[list[str], list[str]]:
    """Return (args for the probe, notes about stand-ins used)."""
    args = list(server_args)
    notes = []
    subs = {"--model-path": STANDIN_MODEL, "--speculative-draft-model-path": STANDIN_DRAFT}
    for i, a in enumerate(args[:-1]):
        if a in subs and not (Path(args[i + 1]) / "config.json").is_file():
            notes.append(f"{a} {args[i + 1]} absent here: bundled config-only stand-in used")
            args[i + 1] = str(subs[a])
        elif a == "--config":  # the probe server may run in another mount namespace (a container's host): a copy
            text = _readable(Path(args[i + 1]))
            if text is None:
                notes.append("API-key file absent here: a throwaway one used")
            else:
                write_key_file_text(secret_file, text)
            args[i + 1] = str(secret_file)
    if "--device" not in args:
        args += ["--device", "cuda"]
    return args, notes


def _readable(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None


def run_probe(
    python: SGLangPython, args: list[str], platform: str | None = "sm120", also: list[list[str]] | None = None
) -> dict[str, Any]:
    """SGLang's verdict on ``args`` (and on each argv of ``also``: the other ranks): from the probe server that
    ``$KIMI_SERVE_PROBE_SOCKET`` names (SGLang not imported again), else from a fresh interpreter."""
    request: dict[str, Any] = {"args": args, "platform": platform}
    if also:
        request["also"] = also
    served = _ask_probe_server(python, request)
    if served is not None:
        return served
    env = with_pythonpath(process_environ(), package_root())
    try:
        done = proc.run(
            proc.python_argv(python.path, "-m", "kimi_serve.sglang.probe"),
            timeout=PROBE_TIMEOUT_S,
            env=env,
            input=json.dumps(request),
        )
    except proc.NotInstalled:
        return {"error": f"interpreter {python.path} ({python.origin}) does not exist"}
    try:
        verdict: dict[str, Any] = json.loads(done.out.strip().splitlines()[-1])
        return verdict
    except (ValueError, IndexError):
        tail = (done.err.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{python.path} -m kimi_serve.sglang.probe failed (exit {done.rc}): {tail}"}


def _ask_probe_server(python: SGLangPython, request: dict[str, Any]) -> dict[str, Any] | None:
    """The probe server's reply (its forked child runs in this process's working directory and environment), or
    None when there is none, it runs another interpreter or in another mount namespace, or it fails to answer."""
    path = settings.current().probe_socket
    if not path:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(PROBE_TIMEOUT_S)
            conn.connect(path)
            with conn.makefile("rwb") as stream:
                body = {**request, "cwd": os.getcwd(), "env": process_environ()}
                stream.write(json.dumps(body).encode() + b"\n")
                stream.flush()
                reply = json.loads(stream.readline())
    except (OSError, ValueError):
        return None
    if not isinstance(reply, dict) or os.path.realpath(str(reply.pop("python", ""))) != os.path.realpath(python.path):
        return None
    if reply.pop("mount_ns", None) != mount_namespace():  # it sees other files (a container's client, a host server)
        return None
    return reply


def other_ranks(args: list[str], count: int) -> list[list[str]]:
    """The argv of every other rank of a multi-node launch: the same words, only ``--node-rank``'s value differs."""
    if count <= 1 or "--node-rank" not in args:
        return []
    i = args.index("--node-rank") + 1
    return [[*args[:i], str(r), *args[i + 1 :]] for r in range(count) if str(r) != args[i]]


def _sg(name: str, status: str, message: str, fix: str = "") -> Finding:
    return Finding("sglang", name, status, message, fix)


def _rank_findings(results: list[dict[str, Any]], profile: Profile, version: str) -> list[Finding]:
    """One finding per other rank: SGLang's parser and resolution (check_server_args) on that rank's argv."""
    ranks = [r for r in range(profile.nodes.count) if r != profile.nodes.rank]
    out = []
    for rank, res in zip(ranks, results, strict=False):
        step = "parse" if not res["parse"]["ok"] else "resolve" if not res.get("resolve", {}).get("ok") else None
        if step:
            said = f"SGLang {version} rejects rank {rank}'s argv ({step}): {res[step]['error']}"
            out.append(_sg(f"rank {rank}", FAIL, said, "fix the profile key behind it"))
        else:
            said = f"SGLang {version}'s parser and check_server_args accept rank {rank}'s argv"
            said += " (only --node-rank differs)"
            out.append(_sg(f"rank {rank}", PASS, said))
    return out


# Requested value -> resolved key: SGLang must run what the profile asked for, not a silent rewrite.
_EXPECTED: dict[str, Callable[[Profile], object]] = {
    "speculative_num_draft_tokens": lambda p: p.speculative.num_draft_tokens if p.speculative.enabled else None,
    "speculative_eagle_topk": lambda p: p.speculative.eagle_topk if p.speculative.enabled else None,
    "tool_call_parser": lambda p: p.parsers.tool_call,
    "reasoning_parser": lambda p: p.parsers.reasoning,
    "flashinfer_allreduce_fusion_backend": lambda p: p.allreduce.flashinfer_fusion_backend,
    "enable_torch_symm_mem": lambda p: p.allreduce.torch_symm_mem,
    "weight_loader_prefetch_checkpoints": lambda p: p.loader.prefetch or None,
    "weight_loader_prefetch_num_threads": lambda p: p.loader.prefetch_num_threads,
}


def check_with_sglang(profile: Profile, launch: Launch, python: SGLangPython | None = None) -> list[Finding]:
    if python is None:
        try:
            python = find_sglang_python(profile.python)
        except KimiServeError as exc:
            return [_sg("sglang", FAIL, exc.message, exc.hint or "")]
    if python is None:
        return [_sg("sglang", SKIP, "SGLang not found: checked against the committed flag table only", BUILD_HINT)]
    with tempfile.TemporaryDirectory(prefix="kimi-serve-check-") as tmp:
        secret = Path(tmp) / "secrets.yaml"  # in a 0700 directory: it may get a copy of the real key file
        write_key_file(secret, "stand-in-key-for-check")
        args, notes = _adapt(launch.server_args, secret)
        result = run_probe(python, args, also=other_ranks(args, profile.nodes.count))
    if "error" in result:
        return [_sg("sglang", FAIL, result["error"], "check the SGLang installation")]
    version = result.get("sglang_version", "?")
    return _verdict(profile, result, notes, version) + _rank_findings(result.get("also") or [], profile, version)


def _verdict(profile: Profile, result: dict[str, Any], notes: list[str], version: str) -> list[Finding]:
    """Findings for the profile's own argv (this host's rank on a multi-node profile)."""
    findings = [_sg("stand-in", PASS, note) for note in notes]
    parse = result["parse"]
    if not parse["ok"]:
        said = f"SGLang {version}'s parser rejects the argv: {parse['error']}"
        return [*findings, _sg("parse", FAIL, said, "fix the flag it names")]
    rank = f" of rank {profile.nodes.rank}" if profile.nodes.count > 1 else ""
    findings.append(_sg("parse", PASS, f"SGLang {version}'s own parser accepts the argv{rank}"))
    resolve = result["resolve"]
    if not resolve["ok"]:
        said = f"SGLang {version} rejects the configuration under SM120: {resolve['error']}"
        return [*findings, _sg("resolve", FAIL, said, "fix the profile key behind it")]
    values = resolve["values"]
    loader = result.get("loader") or {}
    if loader and not loader.get("ok"):
        said = f"SGLang {version}'s weight loader rejects --model-loader-extra-config: {loader.get('error')}"
        findings.append(_sg("loader", FAIL, said, "fix the loader: section (or the flag in extra_args)"))
    elif loader.get("checked"):
        extra = values.get("model_loader_extra_config")
        said = f"SGLang {version}'s weight loader accepts its extra config {extra!r} (load format "
        findings.append(_sg("loader", PASS, said + f"{loader.get('load_format')})"))
    rewrites = [
        f"{key}={values.get(key)!r} (asked {expect(profile)!r})"
        for key, expect in _EXPECTED.items()
        if expect(profile) is not None and key in values and values[key] != expect(profile)
    ]
    if rewrites:
        said = "SGLang rewrote: " + "; ".join(rewrites)
        findings.append(_sg("resolve", WARN, said, "set these values explicitly in the profile"))
    else:
        said = (
            f"resolves under simulated SM120 (attention {values.get('attention_backend')}, draft tokens "
            f"{values.get('speculative_num_draft_tokens')}, fusion {values.get('flashinfer_allreduce_fusion_backend')})"
        )
        findings.append(_sg("resolve", PASS, said))
    return findings
