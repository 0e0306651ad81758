"""No silent config loss: empty sections override nothing, empty env/extra_args are no-ops, duplicate keys are errors
naming file:line: key (golden one-line errors)."""

from __future__ import annotations

import pytest

from kimi_serve.profile.loader import load_profile


def _error_line(res) -> str:  # type: ignore[no-untyped-def]
    assert res.code == 2, (res.code, res.out, res.err)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    return lines[0]


@pytest.mark.parametrize(
    "body",
    [
        "extends: prod\nserver:\n",
        "extends: prod\nserver:\n  # only a comment\n",
        "extends: prod\nallreduce:\n",
        "extends: prod\nspeculative:\n  # EAGLE-3 stays on\n",
        "extends: prod\nenv:\n",
        "extends: prod\nextra_args:\n",
        "extends: prod\nserver:\nallreduce:\nspeculative:\nenv:\nextra_args:\nmemory:\n",
    ],
)
def test_empty_sections_override_nothing(write_profile, body):
    child = load_profile(str(write_profile(body)))
    assert child.to_dict() == load_profile("prod").to_dict()
    assert child.server.host == "0.0.0.0" and child.server.api_key_file and child.server.watchdog_timeout
    assert child.allreduce.pcie_ipc and child.allreduce.torch_symm_mem and child.speculative.enabled


def test_empty_env_and_extra_args_in_a_standalone_profile(write_profile, cli):
    path = write_profile("env:\nextra_args:\nmodel:\n  path: /m\n  served_name: x\n")
    p = load_profile(str(path))
    assert dict(p.env) == {} and tuple(p.extra_args) == ()
    assert cli("render", "--profile", str(path)).code == 0


@pytest.mark.parametrize(
    "body, golden",
    [
        (
            "extends: prod\nserver:\n  port: 1\n  port: 2\n",
            "kimi-serve: error: {f}:4: server.port: key 'port' is given twice in one mapping (first on line 3) "
            "(fix: keep one of them (YAML would silently use the last))",
        ),
        (
            "extends: prod\nserver:\n  port: 1\nserver:\n  host: x\n",
            "kimi-serve: error: {f}:4: server: key 'server' is given twice in one mapping (first on line 2) "
            "(fix: keep one of them (YAML would silently use the last))",
        ),
        (
            "extends: prod\nenv:\n  A: '1'\n  A: '2'\n",
            "kimi-serve: error: {f}:4: env.A: key 'A' is given twice in one mapping (first on line 3) "
            "(fix: keep one of them (YAML would silently use the last))",
        ),
    ],
)
def test_duplicate_keys_are_golden_one_line_errors(write_profile, cli, body, golden, monkeypatch):
    path = write_profile(body)
    monkeypatch.chdir(path.parent)
    assert _error_line(cli("show", "--profile", str(path))) == golden.format(f=path.name)


def test_empty_required_value_is_an_error_not_a_reset(write_profile, cli, monkeypatch):
    path = write_profile("extends: prod\nserver:\n  host:\n")
    monkeypatch.chdir(path.parent)
    line = _error_line(cli("render", "--profile", str(path)))
    assert line.startswith(f"kimi-serve: error: {path.name}:3: server.host: expected a value (null is not allowed")
