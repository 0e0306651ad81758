"""No profile or --set value escapes its line (issue #29.3): every string-valued key, rendered with hostile values into
the unit and the monitoring units, then read back with a small parser of systemd's unit syntax (systemd.syntax(7),
systemd.service(5)): no directive appears that a tame value does not give, and the value comes back exactly. A value
that cannot be carried (newline, CR, NUL, other control characters) is refused with one line naming the key, exit 2,
and install-service writes nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.profile.loader import load_profile
from kimi_serve.profile.schema import SECTIONS
from kimi_serve.service.monitor_units import render_monitor
from kimi_serve.service.unit import UnitContext, render_unit

HOSTILE = "50% $HOME ${X} %n \"q\" 'a' back\\slash sp  ace ; #x"
INJECT = "x\nExecStartPre=+/bin/sh -c id"
EXEC = {"ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecReload"}
WORDS = {"Environment", "ReadWritePaths"}  # quoted words, C escapes (no $ expansion)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "s": " ", "0": "\0"}

# every string-valued key of the schema (lists and maps by one element)
STRING_KEYS = [
    f"{section}.{key}" if section else key
    for section, keys in SECTIONS.items()
    for key, spec in keys.items()
    if spec.type in ("str", "path", "str_list")
] + ["env.KIMI_TEST"]


def _lines(text: str) -> list[str]:
    """Logical lines as systemd reads them: any of \\n, \\r, \\0 ends one; an odd trailing backslash continues it."""
    out, pending = [], ""
    for raw in re.split(r"\r\n|\r|\n|\0", text):
        line = pending + raw
        escaped = False
        for ch in line:
            escaped = False if escaped else ch == "\\"
        if escaped:
            pending = line[:-1] + " "
            continue
        pending = ""
        out.append(line)
    return out + ([pending] if pending else [])


def directives(text: str) -> list[tuple[str, str, str]]:
    """``(section, key, raw value)`` of every assignment; a line that is none is an assignment of key ``?``."""
    found, section = [], ""
    for line in _lines(text):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        found.append((section, key.strip() if sep else "?", value.strip()))
    return found


def _unspecify(value: str) -> str:
    """Unit specifiers: %% is a literal %; any other %X stays as written (a resolved specifier, never the input)."""
    return re.sub(r"%(.)", lambda m: "%" if m.group(1) == "%" else f"<spec %{m.group(1)}>", value)


def _words(value: str) -> list[str]:
    """systemd's extract_first_word with unquoting and C unescaping."""
    words, cur, quote, started, i = [], "", "", False, 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            cur, started, i = cur + _ESCAPES.get(nxt, nxt), True, i + 2
            continue
        if quote:
            if c == quote:
                quote = ""
            else:
                cur += c
        elif c in "\"'":
            quote, started = c, True
        elif c.isspace():
            if started:
                words.append(cur)
            cur, started = "", False
        else:
            cur, started = cur + c, True
        i += 1
    assert not quote, f"unterminated quote in {value!r}"
    return [*words, cur] if started else words


def _dollars(word: str) -> str:
    """Exec-time variable expansion: $$ is a literal $; an expanded $NAME/${NAME} shows as a marker."""
    return re.sub(r"\$(\$|\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", lambda m: "$" if m.group(1) == "$" else "<var>", word)


def values(text: str) -> list[str]:
    """What systemd makes of every assignment: exec words, Environment= values, list words, verbatim settings."""
    out: list[str] = []
    for _section, key, raw in directives(text):
        value = _unspecify(raw)
        if key in EXEC:
            out += [_dollars(w) for w in _words(value)]
        elif key in WORDS:
            out += [w.partition("=")[2] if key == "Environment" else w.lstrip("-") for w in _words(value)]
        elif key == "LoadCredential":
            out.append(value.partition(":")[2])
        else:
            out.append(value)
    return out


CTX = UnitContext(kimi_serve=shutil.which("true") or "/bin/true", package_root="/opt/kimi-serve/src")


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_SERVE_SGLANG_PYTHON", sys.executable)  # an executable that exists, for verify


def _render(sets: list[str]) -> list[tuple[str, str]]:
    """(file name, text) of the main unit and the monitoring units of ``sim`` with ``sets``."""
    profile = load_profile("sim", ["server.api_key_file=/etc/kimi-serve/k.yaml", *sets])
    launch = validated_launch(profile)
    unit = render_unit(profile, launch, CTX)
    monitor = render_monitor(profile, launch, CTX, unit.name)
    return [(u.name, u.text) for u in (unit, *(monitor.files if monitor else ()))]


def _shape(units: list[tuple[str, str]]) -> Counter[tuple[str, str, str]]:
    return Counter((name, section, key) for name, text in units for section, key, _ in directives(text))


def _set(key: str, value: str) -> str:
    import json

    spec_type = next(
        (s.type for sec, ks in SECTIONS.items() for k, s in ks.items() if (f"{sec}.{k}" if sec else k) == key), "str"
    )
    return f"{key}={json.dumps([value]) if spec_type == 'str_list' else json.dumps(value)}"


@pytest.mark.parametrize("key", STRING_KEYS)
def test_hostile_value_stays_one_value(key: str, tmp_path: Path) -> None:
    is_path = any(
        spec.type == "path" and (f"{sec}.{k}" if sec else k) == key
        for sec, ks in SECTIONS.items()
        for k, spec in ks.items()
    )
    tame = "/srv/tame-7f3a.yaml" if is_path else "tame-7f3a"
    hostile = f"/srv/{HOSTILE}.yaml" if is_path else HOSTILE
    try:
        base = _render([_set(key, tame)])
    except KimiServeError as exc:  # a key whose values are constrained (choices, a name, an executable)
        base = None
        assert exc.exit_code == ExitCode.USAGE
    try:
        units = _render([_set(key, hostile)])
    except KimiServeError as exc:
        line = exc.one_line()
        assert exc.exit_code == ExitCode.USAGE and "\n" not in line, line
        assert key in line or key.split(".")[-1] in line, line
        return
    assert base is not None, f"{key}: a hostile value renders where a tame one does not"
    assert _shape(units) == _shape(base), f"{key}: the hostile value changed the units' directives"
    tame_seen = [v for _, text in base for v in values(text) if tame in v]
    hostile_seen = [v for _, text in units for v in values(text) if hostile in v]
    assert len(hostile_seen) == len(tame_seen), (key, hostile_seen, tame_seen)  # round-trips wherever it reaches
    if shutil.which("systemd-analyze"):
        for name, text in units:
            (tmp_path / name).write_text(text)
        done = subprocess.run(
            ["systemd-analyze", "verify", *(str(tmp_path / n) for n, _ in units)], capture_output=True, text=True
        )
        assert (done.returncode, done.stderr.strip()) == (0, ""), (key, done.stderr)


def test_values_that_reach_the_units_do_round_trip() -> None:
    """The keys above that a hostile value passes through, shown to land in the units exactly."""
    units = _render(
        [
            _set("model.served_name", HOSTILE),
            _set("env.KIMI_TEST", HOSTILE),
            _set("service.working_directory", f"/srv/{HOSTILE}"),
            _set("server.api_key_file", f"/srv/{HOSTILE}.yaml"),
            _set("monitor.metrics_file", f"/srv/{HOSTILE}.prom"),
        ]
    )
    seen = [v for _, text in units for v in values(text)]
    for expected in (HOSTILE, f"/srv/{HOSTILE}", f"/srv/{HOSTILE}.yaml", f"/srv/{HOSTILE}.prom"):
        assert expected in seen, expected


@pytest.mark.parametrize("bad", ["\n", "\r", "\0", "\t", "\x1b", "\u2028", "\x85"])
@pytest.mark.parametrize("key", ["description", "model.served_name", "service.working_directory", "env.KIMI_TEST"])
def test_control_characters_are_refused_naming_the_key(key: str, bad: str) -> None:
    value = INJECT.replace("\n", bad)
    with pytest.raises(KimiServeError) as err:
        _render([f"{key}={value}"])
    line = err.value.one_line()
    assert err.value.exit_code == ExitCode.USAGE and "\n" not in line and f"--set {key}" in line, line


def test_yaml_value_with_a_newline_is_refused_naming_the_key(write_profile) -> None:  # type: ignore[no-untyped-def]
    path = write_profile('extends: sim\nmodel:\n  served_name: "x\\nExecStartPre=+/bin/sh -c id"\n', name="nl")
    with pytest.raises(KimiServeError) as err:
        load_profile(str(path))
    assert "nl.yaml:3: model.served_name" in err.value.one_line()


@pytest.mark.parametrize(
    ("value", "fixed"), [("/srv/../etc/x", "/etc/x"), ("/srv/./x/", "/srv/x"), ("//srv//x", "/srv/x")]
)
def test_paths_must_be_normalised(value: str, fixed: str) -> None:
    with pytest.raises(KimiServeError) as err:
        load_profile("sim", [f"service.working_directory={value}"])
    assert f"normalised absolute path ({fixed})" in err.value.one_line()


def test_install_service_refuses_and_writes_nothing(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "root"
    root.mkdir()
    for args in (
        ["--set", f"model.served_name={INJECT}"],
        ["--set", "service.working_directory=/srv/x\n"],
        ["--unit-name", "evil\n"],
    ):
        result = cli("install-service", "--profile", "sim", "--root", str(root), *args)
        assert result.code == 2, result.err
        assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err, result.err
        assert "--set" in result.err or "--unit-name" in result.err
    assert list(root.rglob("*")) == []


def test_a_key_that_would_break_the_key_file_is_refused_before_writing(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("KIMI_SERVE_API_KEY", "k1\nadmin-api-key: mine")  # a second YAML key in the file
    result = cli(
        "install-service",
        "--profile",
        "sim",
        "--root",
        str(root),
        "--set",
        "server.api_key_file=/etc/kimi-serve/k.yaml",
    )
    assert result.code == 2 and "KIMI_SERVE_API_KEY" in result.err and len(result.err.strip().splitlines()) == 1
    assert list(root.rglob("*")) == []
