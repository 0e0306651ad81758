"""Hostile or broken input ends in one line and exit 2, in time linear in its size (core/inputs.py, the loader):
an alias bomb, deep nesting (a profile, --set, a bench workload, --perf-model), NaN and infinities for every number
in the schema, integers and dates YAML cannot read, and profile names or `extends:` the filesystem cannot hold."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.bench.workload import prepare
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.inputs import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES
from kimi_serve.profile.loader import load_profile
from kimi_serve.profile.schema import SECTIONS


def _one_line(res: Any, *words: str) -> str:
    assert res.code == 2, (res.code, res.out, res.err[:500])
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.err, res.err[:500]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# 399 bytes: nine levels of nine aliases, 9**9 (387 million) strings once expanded. The duplicate-key walk used to
# visit every one of them (35-67 s before its error); now the expansion is counted once per node.
BOMB = (
    "\n".join(
        ["extends: prod", 'description: &a ["x","x","x","x","x","x","x","x","x"]']
        + [
            f"laugh{i}: &{c} [" + ",".join([f"*{p}"] * 9) + "]"
            for i, (p, c) in enumerate(zip("abcdefgh", "bcdefghi", strict=True))
        ]
    )
    + "\n"
)


def test_the_alias_bomb_is_refused_at_once(write_profile: Any, cli: Any) -> None:
    path = write_profile(BOMB)
    assert 380 <= len(BOMB.encode()) <= 420
    start = time.process_time()
    line = _one_line(
        cli("check", "--offline", "--profile", str(path)), f"more than {MAX_NODES} values once its aliases are expanded"
    )
    assert time.process_time() - start < 2.0
    assert f"{path.name}:" in line and "fix:" in line


def test_an_alias_inside_its_own_value_is_refused(write_profile: Any, cli: Any) -> None:
    path = write_profile("extends: prod\nextra_args: &a [*a]\n")
    _one_line(cli("render", "--profile", str(path)), "refers to the value that contains it", ":2:")


def test_legitimate_anchors_and_aliases_still_work(write_profile: Any) -> None:
    path = write_profile(
        "extends: prod\ndescription: &d kimi-shared\nservice:\n  unit_name: *d\n"
        "server: &srv\n  port: 31000\nrouter:\n  <<: *srv\n  policy: round_robin\n  port: 31001\n"
    )
    profile = load_profile(str(path))  # a key merged with << and set again is an override, not a duplicate
    assert profile.service.unit_name == "kimi-shared" and (profile.server.port, profile.router.port) == (31000, 31001)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000])
def test_deep_nesting_in_a_profile(write_profile: Any, cli: Any, depth: int) -> None:
    path = write_profile("extends: prod\nextra_args: " + "[" * depth + "]" * depth + "\n")
    _one_line(cli("render", "--profile", str(path)), f"nested deeper than {MAX_DEPTH} levels", ":2:")


def test_deep_nesting_in_a_set_value(cli: Any) -> None:
    _one_line(cli("render", "--profile", "sim", "--set", "env.X=" + "[" * 3000), "--set env.X", "nested deeper")


def test_deep_nesting_in_a_bench_workload(tmp_path: Path, cli: Any) -> None:
    workload = tmp_path / "deep.jsonl"
    workload.write_text('{"messages": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(KimiServeError) as err:
        prepare(str(workload), 1, tmp_path)
    assert err.value.exit_code == ExitCode.USAGE and "nested deeper" in err.value.one_line()
    args = ["bench", "--profile", "sim", "--against", "sim-baseline", "--out", str(tmp_path / "out")]
    _one_line(cli(*args, "--perf-model", "[" * 5000), "--perf-model", "nested deeper")
    _one_line(cli(*args, "--perf-model", '{"per_token_ms": NaN}'), "--perf-model", "finite")


def _numeric_keys() -> list[str]:
    return [
        f"{section}.{key}" if section else key
        for section, keys in SECTIONS.items()
        for key, spec in keys.items()
        if spec.type in ("int", "float")
    ]


@pytest.mark.parametrize("key", _numeric_keys())
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_no_number_in_the_schema_takes_nan_or_an_infinity(cli: Any, key: str, value: str) -> None:
    _one_line(cli("render", "--profile", "sim", "--set", f"{key}={value}"), key)


def test_nan_in_a_file_never_reaches_the_unit(write_profile: Any, cli: Any) -> None:
    path = write_profile("extends: prod\nmemory:\n  mem_fraction_static: .nan\nverify:\n  timeout: .inf\n")
    _one_line(cli("render", "--profile", str(path)), "memory.mem_fraction_static", "0.1..0.98", ":3:")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("service:\n  limit_nofile: " + "9" * 5000 + "\n", ["cannot read", ":3:"]),
        ("description: 2026-13-45\n", ["cannot read", "month must be in 1..12"]),
        ("memory:\n  mem_fraction_static: 1.0e+999\n", ["memory.mem_fraction_static"]),
    ],
)
def test_values_yaml_cannot_read(write_profile: Any, cli: Any, text: str, words: list[str]) -> None:
    path = write_profile("extends: prod\n" + text)
    _one_line(cli("render", "--profile", str(path)), *words)


def test_a_huge_integer_in_set(cli: Any) -> None:
    _one_line(cli("render", "--profile", "sim", "--set", "service.limit_nofile=" + "9" * 5000), "not valid YAML")


def test_long_profile_names(write_profile: Any, cli: Any, tmp_path: Path) -> None:
    _one_line(cli("render", "--profile", "a" * 300), "longer than the filesystem allows", "at most 250")
    _one_line(cli("render", "--profile", str(tmp_path / ("b" * 300)) + ".yaml"), "longer than the filesystem")
    _one_line(cli("render", "--profile", "~no-such-user-here/x.yaml"), "no such user")
    child = write_profile("extends: " + "c" * 300 + "\n")
    _one_line(cli("render", "--profile", str(child)), f"{child.name}:1: extends", "longer than the filesystem")
    child = write_profile(f"extends: {tmp_path}/{'d' * 300}.yaml\n", name="child2")
    _one_line(cli("render", "--profile", str(child)), "child2.yaml:1: extends", "longer than the filesystem")
    line = _one_line(cli("render", "--profile", str(write_profile('extends: "x\\ty"\n', name="ctl"))), "extends")
    assert "\t" not in line


def test_error_messages_stay_short(write_profile: Any, cli: Any) -> None:
    many = ", ".join(f'"{i}"' for i in range(MAX_NODES // 2))
    path = write_profile(f"extends: prod\nextra_args: [{many}, [1]]\ndescription: {'z' * 100_000}\n")
    line = _one_line(cli("render", "--profile", str(path)), "extra_args")
    assert len(line) < 600
    path = write_profile("extends: prod\nserver:\n  ? " + "p" * 5000 + "\n  : 1\n", name="longkey")
    line = _one_line(cli("render", "--profile", str(path)), "unknown key", "longkey.yaml:3: 'server.ppp")
    assert len(line) < 600


def test_limit_nofile_stays_below_the_kernel_ceiling(cli: Any) -> None:
    _one_line(cli("render", "--profile", "sim", "--set", "service.limit_nofile=" + "9" * 20), "1024..2147483584")


@pytest.mark.parametrize("key", ["verify.timeout", "monitor.timeout", "server.watchdog_timeout"])
def test_nan_timeouts_never_reach_install_service(cli: Any, tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    res = cli("install-service", "--profile", "sim", "--set", f"{key}=.nan", "--root", str(root), "--dry-run")
    _one_line(res, key, "got nan")
    assert not any(root.rglob("*"))


# ------------------------------------------------------------------------- every file kind: deep and huge (issue 44)

DEEP_YAML = "api-key: " + "[" * 5000 + "]" * 5000 + "\n"
DEEP_MAP = "api-key:\n" + "".join("  " * i + "k:\n" for i in range(1, 60)) + "  " * 60 + "v\n"


def _key_file(tmp_path: Path, text: str, name: str = "key.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("text", [DEEP_YAML, DEEP_MAP, "api-key: k\n" + "#" * 70_000 + "\n"])
def test_a_deep_or_huge_api_key_file_is_exit_2_naming_it(tmp_path: Path, cli: Any, text: str) -> None:
    """verify reads the key (core/keyfile.py read_key_file): exit 2 and the file named, never a RecursionError (it
    was exit 70) or a whole file read; check and doctor judge the same file (key_file_problem) as a finding."""
    key = _key_file(tmp_path, text)
    line = _one_line(cli("verify", "--host", "127.0.0.1:9", "--api-key-file", str(key)), f"--api-key-file {key}")
    assert "nested deeper than" in line or "over 65536 bytes" in line
    from kimi_serve.core.keyfile import admin_key_problem, key_file_problem, read_admin_key

    problem = key_file_problem(key)
    assert problem is not None and str(key) in problem[0]
    assert admin_key_problem(key) is not None  # not a mapping it can read: no admin key, no crash
    with pytest.raises(KimiServeError) as err:
        read_admin_key(key)
    assert err.value.exit_code == ExitCode.USAGE


def test_a_profile_naming_a_deep_key_file_fails_check_naming_it(tmp_path: Path, write_profile: Any, cli: Any) -> None:
    key = _key_file(tmp_path, DEEP_YAML)
    path = write_profile(f"extends: sim\nserver:\n  api_key_file: {key}\n")
    res = cli("check", "--profile", str(path))
    assert res.code == ExitCode.FAILED and "Traceback" not in res.out + res.err, res.err[-500:]
    assert f"API-key file {key} is nested deeper than {MAX_DEPTH} levels" in res.out


def test_a_huge_profile_is_refused_without_reading_it_whole(write_profile: Any, cli: Any, tmp_path: Path) -> None:
    path = write_profile("extends: sim\n")
    with path.open("r+b") as handle:  # sparse: 1 GiB that costs no disk
        handle.truncate(1024**3)
    line = _one_line(cli("check", "--offline", "--profile", str(path)), f"{path}", f"over {MAX_FILE_BYTES} bytes")
    assert "fix:" in line


def test_a_deep_request_on_any_line_of_a_bench_workload(tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    fine = '{"messages": [{"role": "user", "content": "hi"}]}\n'
    workload.write_text(fine * 3 + '{"messages": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(KimiServeError) as err:
        prepare(str(workload), 1, tmp_path)
    line = err.value.one_line()
    assert err.value.exit_code == ExitCode.USAGE and str(workload) in line and "line 4 is nested deeper" in line


def test_a_huge_bench_workload_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kimi_serve.bench import workload as module

    monkeypatch.setattr(module, "MAX_WORKLOAD_BYTES", 1024 * 1024)  # the real bound is 256 MiB: the same code path
    path = tmp_path / "w.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "' + "x" * (2 * 1024 * 1024) + '"}]}\n')
    with pytest.raises(KimiServeError) as err:
        prepare(str(path), 1, tmp_path)
    assert err.value.exit_code == ExitCode.USAGE and f"{path}: over {1024 * 1024} bytes" in err.value.one_line()
    fifo = tmp_path / "w.fifo"
    os.mkfifo(fifo)
    with pytest.raises(KimiServeError) as err:  # a FIFO is never opened for a blocking read
        prepare(str(fifo), 1, tmp_path)
    assert err.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize("kind", ["deep", "huge"])
def test_a_deep_or_huge_patch_manifest_is_exit_2_naming_it(tmp_path: Path, kind: str) -> None:
    from kimi_serve.patches import load_patch_set

    (tmp_path / "set").mkdir()
    manifest = tmp_path / "set" / "manifest.json"
    if kind == "deep":
        manifest.write_text('{"schema": ' + "[" * 5000 + "]" * 5000 + "}")
    else:
        manifest.write_text("{}")
        with manifest.open("r+b") as handle:
            handle.truncate(MAX_FILE_BYTES + 10)
    with pytest.raises(KimiServeError) as err:
        load_patch_set(str(tmp_path / "set"))
    line = err.value.one_line()
    assert err.value.exit_code == ExitCode.USAGE and str(manifest) in line
    assert ("nested deeper" if kind == "deep" else f"over {MAX_FILE_BYTES} bytes") in line


def _records(tmp_path: Path) -> list[tuple[Path, Any]]:
    """(where a record lives, a call that reads it back: what a corrupt record reads as) for each record kimi-serve
    writes and re-reads."""
    from kimi_serve.core.lock import holder
    from kimi_serve.core.runs import read_runs, runs_dir
    from kimi_serve.engine.prefix import RECORD_NAME
    from kimi_serve.engine.prefix import read_record as engine_record
    from kimi_serve.patches.journal import intent_path, read_intent
    from kimi_serve.patches.state import read_record as patch_record
    from kimi_serve.service.state import read_record as service_record

    state = tmp_path / "state"
    runs_dir(state).mkdir(parents=True, exist_ok=True)
    (tmp_path / "prefix").mkdir(exist_ok=True)
    (tmp_path / "patches").mkdir(exist_ok=True)
    return [
        (runs_dir(state) / "up-1.json", lambda: read_runs(state)),
        (tmp_path / "lock.json", lambda: holder(tmp_path / "lock.json")),
        (tmp_path / "prefix" / RECORD_NAME, lambda: engine_record(tmp_path / "prefix")),
        (intent_path(tmp_path / "patches"), lambda: read_intent(tmp_path / "patches")),
        (tmp_path / "patch-record.json", lambda: patch_record(tmp_path / "patch-record.json")),
        (tmp_path / "service-record.json", lambda: service_record(tmp_path / "service-record.json")),
    ]


@pytest.mark.parametrize("kind", ["deep", "huge"])
def test_deep_or_huge_records_read_back_as_unreadable_never_a_crash(tmp_path: Path, kind: str) -> None:
    """The records and journals kimi-serve re-reads (run records, lock holders, the engine's record, the patch
    journal and records, the service's records) go through core/inputs.py: a deep or huge one is what a torn one
    is (skipped, unknown, unreadable), never a RecursionError (exit 70) or a file read whole."""
    for path, read in _records(tmp_path):
        if kind == "deep":
            path.write_text('{"pid": ' + "[" * 100_000 + "]" * 100_000 + "}")
        else:
            path.write_text('{"pid": 1}')
            with path.open("r+b") as handle:
                handle.truncate(1024**3)
        got = read()
        assert got in (None, [], {"op": "unknown", "unreadable": True}) or "unreadable" in got, (path, got)
