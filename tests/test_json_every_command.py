"""Every command that takes ``--json`` writes the one envelope (docs/json.md) on success and on failure. The commands
are enumerated from the Typer app itself: a new command with ``--json`` and no case here fails
:func:`test_every_json_command_has_cases`. Everything runs against injected roots and state dirs; a command that
needs a server gets a stand-in on loopback, or an unreachable loopback port for its failure."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ckpt_helpers import opaque_checkpoint

from kimi_serve.cli import app

ENVELOPE = ("kind", "version", "ok", "exit_code", "findings")


def json_commands() -> list[str]:
    """Every command path (``patches status``) whose options include ``--json``, from the app itself."""
    from typer.main import get_command

    def walk(cmd: Any, path: list[str]) -> Iterator[str]:
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            for name, sub in subs.items():
                yield from walk(sub, [*path, name])
        elif any("--json" in getattr(p, "opts", ()) for p in cmd.params):
            yield " ".join(path)

    return sorted(walk(get_command(app), []))


@dataclass
class Ctx:
    tmp: Path
    port: Callable[[], int]
    monkeypatch: pytest.MonkeyPatch

    def unreachable(self) -> str:
        return f"127.0.0.1:{self.port()}"

    def root(self) -> Path:
        r = self.tmp / "root"
        r.mkdir(exist_ok=True)
        return r


Case = Callable[[Ctx], list[str]]


def _ckpt_profile(c: Ctx) -> list[str]:
    model = c.tmp / "ckpt"
    opaque_checkpoint(model, 2, 1 << 16)
    path = c.tmp / "cold.yaml"
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
    return ["prewarm", "--profile", str(path)]


def _bench_recorded(c: Ctx) -> list[str]:
    """An --out where every cell is recorded: the bench resumes without starting a server."""
    from kimi_serve.bench import servers
    from kimi_serve.bench.workload import prepare
    from kimi_serve.profile.loader import load_profile

    c.monkeypatch.setattr("kimi_serve.bench.servers.bring_up", lambda *a, **k: pytest.fail("a server was started"))
    c.monkeypatch.setattr("kimi_serve.bench.chart.matplotlib_missing", lambda: "skipped in this test")
    out = c.tmp / "out"
    out.mkdir()
    workload = prepare("agentic", 2, out)
    cell = {"output_throughput": 100.0, "median_itl_ms": 10.0, "errors": 0}
    for name in ("sim", "sim-baseline"):
        meta = {"name": name, "role": "x", "simulated": True, "speedup": 1.0}
        (out / "profiles").mkdir(parents=True, exist_ok=True)
        (out / "profiles" / f"{name}.json").write_text(json.dumps(meta))
        path = out / "cells" / name / "c1-r0.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        fp = servers.fingerprint(load_profile(name))
        path.write_text(json.dumps({"fingerprint": fp, "workload_digest": workload.digest, "figures": cell}))
    return [
        "bench",
        "-p",
        "sim",
        "--against",
        "sim-baseline",
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--out",
        str(out),
    ]


def _bench_unreachable(c: Ctx) -> list[str]:
    out = str(c.tmp / "out")
    hosts = ["--host", c.unreachable(), "--host", c.unreachable()]
    return ["bench", "-p", "a", "--against", "b", *hosts, "--concurrency", "1", "--requests", "2", "--out", out]


def _capture(
    c: Ctx, recorded: bool, line: str = '{"id": "a", "messages": [{"role": "user", "content": "q"}]}'
) -> list[str]:
    """A prompts file (recorded: its one prompt already in --out's records.jsonl, so no server is asked)."""
    prompts, out = c.tmp / "prompts.jsonl", c.tmp / "capture"
    prompts.write_text(line + "\n")
    if recorded:
        out.mkdir()
        (out / "records.jsonl").write_text('{"id": "a", "input_ids": [1, 2], "loss_mask": [0, 1], "meta": {}}\n')
    return ["capture", "--host", c.unreachable(), "--prompts", str(prompts), "--out", str(out)]


def _doctor_ok(c: Ctx) -> list[str]:
    """The simulator profile on a free port; SGLang itself is the sglang tier's (test_doctor.py): a stand-in here."""
    c.monkeypatch.setattr("kimi_serve.host.doctor.check_sglang", lambda *a: [])
    path = c.tmp / "free.yaml"
    path.write_text(f"extends: sim\nserver:\n  port: {c.port()}\n")
    return ["doctor", "-p", str(path)]


def _verify_ok(c: Ctx) -> list[str]:
    from contract_server import ContractServer

    srv = ContractServer("correct")
    srv.__enter__()
    c.monkeypatch.setattr(c, "cleanup", lambda: srv.__exit__(None, None, None), raising=False)
    return ["verify", "--host", srv.host, "--timeout", "20"]


def _engine_status_ok(c: Ctx) -> list[str]:
    """A matching engine is the engine tier's (a real install): its report here is one that matches, of the cpu lock."""
    from kimi_serve.engine import locks
    from kimi_serve.engine.status import EngineStatus

    fake = EngineStatus(c.tmp, {}, locks.load("cpu"), "python", {})
    c.monkeypatch.setattr("kimi_serve.engine.status.engine_status", lambda *_a: fake)
    return ["engine", "status", "--prefix", str(c.tmp / "venv")]


def _restart_ok(c: Ctx) -> list[str]:
    """A real restart needs the running systemd (tests/systemd/): here the plan and the restart are stand-ins, so the
    command's own printing is what runs."""
    from kimi_serve.service.install import Result

    fleet = SimpleNamespace(profile=None, to_json=lambda: [{"role": "single", "unit": "sglang-kimi.service"}])
    c.monkeypatch.setattr("kimi_serve.service.run.recover", lambda *a, **k: None)
    c.monkeypatch.setattr("kimi_serve.service.run.plan", lambda *a, **k: fleet)
    c.monkeypatch.setattr(
        "kimi_serve.service.run.restart_deployment", lambda *a, **k: (Result("sglang-kimi.service"), None)
    )
    c.monkeypatch.setattr("kimi_serve.service.systemctl.Systemd.unreachable", lambda self: None)  # no systemd here
    return ["restart", "-p", "sim"]


def _site(c: Ctx) -> list[str]:
    from patches_support import extract, pinned_wheel

    from kimi_serve.patches import load_patch_set

    site = extract(pinned_wheel(load_patch_set("sglang-0.5.23-sm120")), c.tmp / "site", whole_package=False)
    return ["--site-packages", str(site), "--state-dir", str(c.tmp / "pstate")]


def _quietly(*args: str) -> int:
    import contextlib
    import io

    from kimi_serve.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(list(args))


def _applied(c: Ctx) -> list[str]:
    args = _site(c)
    assert _quietly("patches", "apply", *args) == 0
    return args


def _installed(c: Ctx) -> list[str]:
    root = str(c.root())
    assert _quietly("install-service", "-p", "sim", "--root", root) == 0
    return ["--root", root]


# command -> [(case id, argv builder, expected exit code or None for "not 0")]
CASES: dict[str, list[tuple[str, Case, int | None]]] = {
    "doctor": [
        ("ok", _doctor_ok, 0),
        ("bad-profile", lambda c: ["doctor", "-p", "nosuch"], 2),
    ],
    "verify": [
        ("ok", _verify_ok, 0),
        ("unreachable", lambda c: ["verify", "--host", c.unreachable(), "--timeout", "3"], 3),
    ],
    "render": [("ok", lambda c: ["render", "-p", "prod"], 0), ("bad-profile", lambda c: ["render", "-p", "prdo"], 2)],
    "check": [
        ("ok", lambda c: ["check", "-p", "prod", "--offline"], None),
        ("usage", lambda c: ["check", "-p", "prod", "--bogus"], 2),
    ],
    "install-service": [
        ("ok", lambda c: ["install-service", "-p", "sim", "--root", str(c.root())], 0),
        ("usage", lambda c: ["install-service", "-p", "sim", "--root", str(c.root()), "--now"], 2),
    ],
    "keyfile": [
        ("ok", lambda c: ["keyfile", "-p", "prod", "--root", str(c.root())], 0),
        ("no-key-file", lambda c: ["keyfile", "-p", "sim", "--root", str(c.root())], 2),
    ],
    "uninstall-service": [
        ("ok", lambda c: ["uninstall-service", "-p", "sim", *_installed(c)], 0),
        ("bad-profile", lambda c: ["uninstall-service", "-p", "nosuch", "--root", str(c.root())], 2),
    ],
    "restart": [
        ("ok", _restart_ok, 0),
        ("usage", lambda c: ["restart", "-p", "sim", "--replica", "1"], 2),
    ],
    "status": [
        ("ok", lambda c: ["status", "-p", "sim", *_installed(c)], None),
        ("bad-profile", lambda c: ["status", "-p", "nosuch", "--root", str(c.root())], 2),
    ],
    "prewarm": [("ok", _ckpt_profile, 0), ("no-checkpoint", lambda c: ["prewarm", "-p", "sim"], 2)],
    "bench": [("ok", _bench_recorded, 0), ("unreachable", _bench_unreachable, 3)],
    "capture": [
        ("ok", lambda c: _capture(c, True), 0),
        ("unreachable", lambda c: _capture(c, False), 3),
        ("bad-line", lambda c: _capture(c, False, '{"messages": []}'), 2),
    ],
    "patches status": [
        ("ok", lambda c: ["patches", "status", *_applied(c)], 0),
        ("not-applied", lambda c: ["patches", "status", *_site(c)], 1),
        ("no-site", lambda c: ["patches", "status", "--site-packages", str(c.tmp / "none")], None),
    ],
    "patches apply": [
        ("ok", lambda c: ["patches", "apply", *_site(c)], 0),
        ("no-site", lambda c: ["patches", "apply", "--site-packages", str(c.tmp / "none")], None),
    ],
    "patches revert": [
        ("ok", lambda c: ["patches", "revert", *_site(c)], 0),
        ("no-site", lambda c: ["patches", "revert", "--site-packages", str(c.tmp / "none")], None),
    ],
    "engine install": [
        ("dry-run", lambda c: ["engine", "install", "--prefix", str(c.tmp / "v"), "--lock", "cpu", "--dry-run"], 0),
        ("bad-lock", lambda c: ["engine", "install", "--prefix", str(c.tmp / "v"), "--lock", "nosuch"], 2),
    ],
    "client-config": [
        ("ok", lambda c: ["client-config", "--client", "opencode", "-p", "sim-dp2"], 0),
        ("unknown-client", lambda c: ["client-config", "--client", "nosuch", "-p", "sim"], 2),
    ],
    "engine status": [
        ("ok", _engine_status_ok, 0),
        ("no-venv", lambda c: ["engine", "status", "--prefix", str(c.tmp / "none")], None),
    ],
}


def test_every_json_command_has_cases() -> None:
    commands = json_commands()
    assert len(commands) >= 15, commands
    assert sorted(CASES) == commands, "a command with --json needs a success and a failure case in CASES"


@pytest.mark.usefixtures("systemd_tools")
@pytest.mark.parametrize(
    "command, name, build, code",
    [(cmd, name, build, code) for cmd, cases in CASES.items() for name, build, code in cases],
    ids=[f"{cmd.replace(' ', '-')}-{name}" for cmd, cases in CASES.items() for name, _b, _c in cases],
)
def test_json_envelope(cli, tmp_path, loopback_port, monkeypatch, command, name, build, code) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    ctx = Ctx(tmp_path, loopback_port, monkeypatch)
    try:
        args = build(ctx)
        res = cli(*args, "--json")
    finally:
        getattr(ctx, "cleanup", lambda: None)()
    doc = json.loads(res.out)  # exactly one document
    assert tuple(doc)[:5] == ENVELOPE, doc
    assert doc["kind"] == "kimi-serve-" + command.replace(" ", "-") and doc["version"] == 1
    assert doc["exit_code"] == res.code and doc["ok"] is (res.code == 0), (res.code, res.err)
    if code is not None:
        assert res.code == code, (res.code, res.err, [f for f in doc["findings"] if f["status"] == "fail"])
    for f in doc["findings"]:
        assert {"code", "message", "fix"} <= set(f) and all(isinstance(f[k], str) for k in ("code", "message", "fix"))
    if name == "ok" or name == "dry-run":
        assert res.code == 0 or code is None, res.err
    else:
        assert res.code != 0 and any(f.get("status", "fail") == "fail" for f in doc["findings"]), doc


def test_doctor_figures_are_numbers(cli, tmp_path, loopback_port, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("kimi_serve.host.doctor.check_sglang", lambda *a: [])
    args = _ckpt_profile(Ctx(tmp_path, loopback_port, monkeypatch))
    doc = json.loads(cli("doctor", *args[1:], "--json").out)
    fig = doc["figures"]
    shards = sum(f.stat().st_size for f in (tmp_path / "ckpt").glob("*.safetensors"))
    assert fig["checkpoint_bytes"] == shards and fig["shards"] == 2 and fig["missing_shards"] == 0
    assert isinstance(fig["cached_bytes"], int) and 0 <= fig["cached_fraction"] <= 1
    assert fig["cached_fraction"] == pytest.approx(fig["cached_bytes"] / fig["checkpoint_bytes"], abs=1e-4)
    assert isinstance(fig["mem_total"], int) and fig["mem_total"] > 0 and fig["ram_margin_fraction"] == 0.1
    if fig["bandwidth_bytes_per_s"] is not None:  # measured (else the source says why)
        assert fig["bandwidth_bytes_per_s"] > 0 and fig["floor_s"] == pytest.approx(
            fig["checkpoint_bytes"] / fig["bandwidth_bytes_per_s"], abs=0.01
        )
        assert isinstance(fig["uncached_floor_s"], float | int) and isinstance(fig["predicted_weights_s"], float | int)
    assert isinstance(fig["bandwidth_source"], str) and isinstance(fig["prediction_basis"], str)
    # the free-space check's numbers: the directory measured (the model's) and its free bytes, as the OS says
    disk = doc["disk"]
    assert disk["path"] == str(tmp_path / "ckpt") and isinstance(disk["free_bytes"], int)
    assert abs(disk["free_bytes"] - shutil.disk_usage(tmp_path / "ckpt").free) < 256 * 2**20  # other tests write too
    sim = json.loads(cli("doctor", "-p", "sim", "--json").out)
    assert sim["figures"] is None and sim["disk"] is None  # the simulator reads no model
