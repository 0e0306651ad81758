"""--set KEY=VALUE on the profile commands, builtin:NAME, same-name overlays on $KIMI_SERVE_PROFILE_PATH, and hints
that repeat what the user typed."""

from __future__ import annotations

import pytest
import yaml

from kimi_serve.profile.loader import load_profile


def _one_line(res, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert res.code == code, (res.code, res.out, res.err)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    return lines[0]


def test_set_overrides_are_typed_and_applied_last():
    p = load_profile(
        "prod",
        [
            "server.port=31000",
            "speculative.enabled=false",
            "env.NCCL_DEBUG=INFO",
            "memory.mem_fraction_static=0.8",
            "extra_args=[--enable-cache-report]",
        ],
    )
    assert p.server.port == 31000 and p.speculative.enabled is False and p.env["NCCL_DEBUG"] == "INFO"
    assert p.memory.mem_fraction_static == 0.8 and tuple(p.extra_args) == ("--enable-cache-report",)
    assert p.server.host == "0.0.0.0"  # siblings stay
    assert p.overrides == (
        "server.port=31000",
        "speculative.enabled=false",
        "env.NCCL_DEBUG=INFO",
        "memory.mem_fraction_static=0.8",
        "extra_args=[--enable-cache-report]",
    )
    assert load_profile("prod", ["server.port=1", "server.port=2"]).server.port == 2


@pytest.mark.parametrize("command", ["show", "render", "check", "up", "install-service", "restart"])
def test_set_typo_gets_did_you_mean_on_every_command(cli, command):
    line = _one_line(cli(command, "--profile", "prod", "--set", "server.prot=1"))
    assert line == "kimi-serve: error: --set: server.prot: unknown key 'prot' (fix: did you mean 'port'?)"


@pytest.mark.parametrize(
    "item, golden",
    [
        (
            "server.port=99999",
            "kimi-serve: error: --set: server.port: expected an integer in 1..65535, got 99999 "
            "(fix: set server.port to an integer in 1..65535)",
        ),
        (
            "server.port=eighty",
            "kimi-serve: error: --set: server.port: expected an integer, got 'eighty' "
            "(fix: set server.port to an integer)",
        ),
        (
            "nokey",
            "kimi-serve: error: --set: expected KEY=VALUE with a dotted key such as server.port, got 'nokey' "
            "(fix: write e.g. --set server.port=8080)",
        ),
        ("servre.port=1", "kimi-serve: error: --set: servre: unknown key 'servre' (fix: did you mean 'server'?)"),
    ],
)
def test_set_errors_are_golden(cli, item, golden):
    assert _one_line(cli("render", "--profile", "prod", "--set", item)) == golden


def test_show_records_the_overrides_and_round_trips(cli, tmp_path):
    res = cli("show", "-p", "prod", "--set", "server.port=31001")
    assert res.code == 0 and "# with --set server.port=31001" in res.out
    copy = tmp_path / "c.yaml"
    copy.write_text(res.out)
    assert load_profile(str(copy)).server.port == 31001


def test_same_name_overlay_extends_the_shipped_profile(monkeypatch, tmp_path, cli):
    (tmp_path / "prod.yaml").write_text("extends: prod\nserver:\n  port: 31222\n")
    monkeypatch.setenv("KIMI_SERVE_PROFILE_PATH", str(tmp_path))
    p = load_profile("prod")
    assert p.server.port == 31222 and p.speculative.enabled and p.source == tmp_path / "prod.yaml"
    assert len(p.chain) == 2
    assert load_profile("builtin:prod").server.port == 30000  # the shipped one, whatever the path holds
    (tmp_path / "prod.yaml").write_text("extends: builtin:prod\nserver:\n  port: 31223\n")
    assert load_profile("prod").server.port == 31223
    res = cli("show", "-p", "prod")
    assert res.code == 0 and yaml.safe_load(res.out)["server"]["port"] == 31223


def test_builtin_unknown_name(cli):
    line = _one_line(cli("show", "-p", "builtin:nosuch"))
    assert "no profile named 'builtin:nosuch'" in line


def test_fix_hint_repeats_the_profile_as_typed(write_profile, cli, monkeypatch):
    path = write_profile("extends: prod\nparsers:\n  tool_call: null\n  reasoning: null\n", name="x")
    monkeypatch.chdir(path.parent)
    line = _one_line(cli("render", "--profile", "./x.yaml", "--set", "server.port=31000"))
    assert "kimi-serve check --profile ./x.yaml --set server.port=31000" in line
