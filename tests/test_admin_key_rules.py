"""server.admin_key: the rule on the profile, and the host layer's reading of the key file."""

from __future__ import annotations

import json
from pathlib import Path

from kimi_serve.check.auth_rules import admin_key_required, rule_admin_key
from kimi_serve.check.host import check_api_key_file
from kimi_serve.core.findings import FAIL, PASS, SKIP
from kimi_serve.core.keyfile import new_admin_key, render_key_file
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile


def _profile(write_profile, key_file: Path, host: str = "0.0.0.0", admin: str = "auto"):  # type: ignore[no-untyped-def]
    return load_profile(
        str(
            write_profile(
                f"extends: prod\nserver:\n  host: {host}\n  api_key_file: {key_file}\n  admin_key: {admin}\n",
                name=f"ak-{host}-{admin}",
            )
        )
    )


def _key(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "secrets.yaml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_keyed_non_loopback_profile_needs_an_admin_key(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    key = _key(tmp_path, "api-key: k1\n")
    p = _profile(write_profile, key)
    assert admin_key_required(p)
    finding = check_api_key_file(str(key), p)
    assert (finding.status, finding.code) == (FAIL, "server.admin_key") and "admin-api-key" in finding.fix
    _key(tmp_path, render_key_file("k1", new_admin_key()))
    assert check_api_key_file(str(key), p).status == PASS
    _key(tmp_path, "api-key: k1\nadmin-api-key: k1\n")
    assert "equals api-key" in check_api_key_file(str(key), p).message


def test_the_rule_leaves_the_key_file_to_the_host_layer_as_a_skip_never_a_pass(
    tmp_path: Path, write_profile, cli
) -> None:  # type: ignore[no-untyped-def]
    """The profile alone cannot show whether the key file holds an admin key: the rule says so as a skip (it was an
    `ok` line before, a to-do shown as done), and check --offline counts it skipped; the host layer gives the verdict."""
    p = _profile(write_profile, _key(tmp_path, "api-key: k1\n"))
    [finding] = list(rule_admin_key(p, build_launch(p, "/usr/bin/python3")))
    assert finding.status == SKIP and "host layer" in finding.message and "doctor" in finding.message
    res = cli("check", "--profile", "prod", "--offline", "--json")
    admin = [f for f in json.loads(res.out)["findings"] if f["code"] == "server.admin_key"]
    assert [f["status"] for f in admin] == [SKIP], admin


def test_none_fails_on_a_public_host_only(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    key = _key(tmp_path, "api-key: k1\n")
    public = _profile(write_profile, key, admin="none")
    [finding] = list(rule_admin_key(public, build_launch(public, "/usr/bin/python3")))
    assert finding.status == FAIL and finding.where.endswith("server.admin_key")
    local = _profile(write_profile, key, host="127.0.0.1")
    assert not admin_key_required(local) and check_api_key_file(str(key), local).status == PASS
    assert [f.status for f in rule_admin_key(local, build_launch(local, "/usr/bin/python3"))] == [PASS]


def test_two_new_admin_keys_differ_and_render_as_sglang_config() -> None:
    a, b = new_admin_key(), new_admin_key()
    assert a != b and len(a) >= 40
    import yaml

    assert yaml.safe_load(render_key_file("k", a)) == {"api-key": "k", "admin-api-key": a}


def test_a_keyed_router_needs_an_admin_key_even_on_loopback(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    """The router's control plane (/workers) takes the admin key alone (kimi_serve/router/shim.py): a keyed
    sim-dp2 on 127.0.0.1 needs one, and server.admin_key: none with a router fails."""
    key = _key(tmp_path, "api-key: k1\n")
    body = f"extends: sim-dp2\nserver:\n  api_key_file: {key}\n"
    routed = load_profile(str(write_profile(body, name="dp2-auto")))
    assert admin_key_required(routed)
    finding = check_api_key_file(str(key), routed)
    assert (finding.status, finding.code) == (FAIL, "server.admin_key")
    none = load_profile(str(write_profile(body + "  admin_key: none\n", name="dp2-none")))
    [rule] = list(rule_admin_key(none, build_launch(none, "/usr/bin/python3")))
    assert rule.status == FAIL and "worker management" in rule.message and "admin-api-key" in rule.fix
