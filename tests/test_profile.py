"""Profiles: YAML syntax, schema, extends, show round-trip; every invalid input -> exit 2 with one clear line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kimi_serve.profile.loader import dump_profile, load_profile
from kimi_serve.profile.schema import SECTIONS, TOP_LEVEL_ONLY


def all_key_paths() -> list[str]:
    """Every key path the schema knows, e.g. ``server.port``; top-level keys have no prefix."""
    paths = sorted(TOP_LEVEL_ONLY)
    for section, keys in SECTIONS.items():
        paths.extend(f"{section}.{k}" if section else k for k in keys)
    return paths


REPO = Path(__file__).resolve().parent.parent


def assert_one_line_error(res, *needles: str) -> None:
    assert res.code == 2, (res.code, res.out, res.err)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1, res.err
    assert "Traceback" not in res.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_shipped_profiles_load():
    prod = load_profile("prod")
    assert prod.parallel.tp_size == 8 and prod.gpus == 8
    assert prod.parsers.tool_call == "kimi_k2" and prod.parsers.reasoning == "kimi_k2"
    s = prod.speculative
    assert (s.enabled, s.algorithm, s.eagle_topk, s.num_steps, s.num_draft_tokens, s.overlap_schedule) == (
        True,
        "EAGLE3",
        1,
        3,
        4,
        True,
    )
    base = load_profile("baseline")
    assert base.speculative.enabled is False
    assert base.model.path == prod.model.path and base.allreduce.pcie_ipc == prod.allreduce.pcie_ipc


@pytest.mark.parametrize("name", ["prod", "baseline"])
def test_show_is_a_standalone_profile_that_round_trips(name, cli, tmp_path):
    res = cli("show", "--profile", name)
    assert res.code == 0, res.err
    data = yaml.safe_load(res.out)
    assert "extends" not in data
    copy = tmp_path / f"{name}-copy.yaml"
    copy.write_text(res.out)
    assert load_profile(str(copy)).to_dict() == load_profile(name).to_dict()


def test_yaml_syntax_error_names_file_line_col(write_profile, cli):
    path = write_profile("model:\n  path: /m\n  served_name: [unclosed\n")
    res = cli("render", "--profile", str(path))
    assert_one_line_error(res, f"{path.name}:", "YAML syntax error")
    assert ":4:" in res.err or ":3:" in res.err


@pytest.mark.parametrize(
    "body, needles",
    [
        ("extends: prod\nservre:\n  port: 1\n", ["servre", "did you mean 'server'"]),
        ("extends: prod\nserver:\n  prot: 1\n", ["server.prot", "did you mean 'port'"]),
        ("extends: prod\nserver:\n  port: 70000\n", ["server.port", "1..65535"]),
        ("extends: prod\nserver:\n  port: eighty\n", ["server.port", "an integer"]),
        ("extends: prod\nparallel:\n  tp_size: true\n", ["parallel.tp_size", "an integer"]),
        ("extends: prod\nmemory:\n  mem_fraction_static: 1.5\n", ["memory.mem_fraction_static", "0.1..0.98"]),
        ("extends: prod\nmodel:\n  path: relative/dir\n", ["model.path", "absolute path"]),
        ('extends: prod\nmodel:\n  served_name: "a\\nb"\n', ["model.served_name", "single-line"]),
        ("extends: prod\nenv:\n  NCCL_DEBUG: true\n", ["env", "quote"]),
        ("extends: prod\nenv:\n  1BAD: x\n", ["env", "valid variable names"]),
        ("extends: prod\nextra_args: --foo\n", ["extra_args", "a list of strings"]),
        ("extends: prod\nengine: vllm\n", ["engine", "sglang, simulator"]),
        ("extends: prod\nserver: 5\n", ["server", "expected a mapping"]),
        ("model:\n  served_name: x\n", ["model.path", "missing required key"]),
        ("- a\n- b\n", ["a profile must be a mapping"]),
        ("extends: nosuchparent\n", ["extends", "no profile named 'nosuchparent'"]),
        ("extends: 5\n", ["extends", "profile name or file path"]),
    ],
)
def test_schema_errors_are_one_line_with_key_and_fix(write_profile, cli, body, needles):
    path = write_profile(body)
    res = cli("render", "--profile", str(path))
    assert_one_line_error(res, path.name, *needles)


def test_error_names_the_line_of_the_key(write_profile, cli):
    path = write_profile("extends: prod\n\nserver:\n  host: 0.0.0.0\n  port: 0\n")
    res = cli("render", "--profile", str(path))
    assert_one_line_error(res, f"{path.name}:5: server.port")


def test_extends_cycle_is_an_error(write_profile, cli):
    write_profile("extends: b\n", name="a")
    path = write_profile("extends: a\n", name="b")
    res = cli("show", "--profile", str(path))
    assert_one_line_error(res, "extends cycle", "a.yaml", "b.yaml")


def test_self_extends_without_another_on_the_path_is_an_error(write_profile, cli):
    path = write_profile("extends: self\n", name="self")
    assert_one_line_error(
        cli("show", "--profile", str(path)),
        "self.yaml:1: extends",
        "names this file itself and no other profile 'self'",
    )


def test_extends_merges_sections_and_env_null_removes(write_profile):
    path = write_profile("extends: prod\nserver:\n  port: 31000\nenv:\n  OMP_NUM_THREADS: null\n  NCCL_DEBUG: WARN\n")
    p = load_profile(str(path))
    assert p.server.port == 31000 and p.server.host == "0.0.0.0"  # sibling keys inherited
    assert "OMP_NUM_THREADS" not in p.env and p.env["NCCL_DEBUG"] == "WARN" and p.env["NCCL_P2P_LEVEL"] == "SYS"


def test_unknown_profile_name_suggests(cli):
    res = cli("render", "--profile", "prdo")
    assert_one_line_error(res, "no profile named 'prdo'", "did you mean 'prod'")


def test_profile_search_path(monkeypatch, tmp_path, cli):
    (tmp_path / "mine.yaml").write_text("extends: prod\nserver:\n  port: 31111\n")
    monkeypatch.setenv("KIMI_SERVE_PROFILE_PATH", str(tmp_path))
    assert load_profile("mine").server.port == 31111


def test_debug_shows_traceback(write_profile, cli):
    path = write_profile("extends: prod\nserver:\n  port: 0\n")
    res = cli("--debug", "render", "--profile", str(path))
    assert res.code == 2 and "Traceback" in res.err


def test_docs_document_every_key_and_only_real_keys():
    doc = (REPO / "docs" / "profiles.md").read_text().split("## Keys", 1)[1]
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", doc, flags=re.M))
    assert documented == set(all_key_paths())


def test_dump_contains_every_key():
    text = dump_profile(load_profile("prod"))
    data = yaml.safe_load(text)
    for kp in all_key_paths():
        if kp == "extends":
            continue
        section, _, key = kp.rpartition(".")
        assert key in (data[section] if section else data), kp
