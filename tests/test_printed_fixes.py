"""Every printed fix runs as printed. Two halves:

- the grammar of every `kimi-serve ...` command the source can print (fixes, hints, advice): the command exists and
  takes every option the text names, and ``--set`` always means KEY=VALUE (it once named a patch set in `patches`);
- the patch-set fixes, rendered for each shipped profile that names patch sets (check's patch layer, doctor and up's
  preflight, `patches status`, verify's advice), are one spelling, and run as printed (through /bin/sh, in a scratch
  state root, against a scratch engine: a venv whose SGLang is the pinned wheel's own files) they apply the sets."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from patches_support import extract, pinned_wheel

from kimi_serve.core.findings import FAIL
from kimi_serve.patches import available_patch_sets, load_patch_set
from kimi_serve.profile.loader import load_profile

SOURCE = Path(__file__).resolve().parent.parent / "kimi_serve"
CONFIGS = SOURCE / "_data" / "configs"
# `kimi-serve WORDS...` up to the end of the command in prose: a closing bracket, quote, backtick, ';' or ','
_COMMAND = re.compile(r"kimi-serve ((?:[a-z][^\s)`;,'\"]*)(?: +[^\s)`;,'\"]+)*)")
_PROSE = {"or", "then", "and", "to", "with", "in", "on", "again", "first", "(or", "it", "its"}


def _texts(path: Path):  # type: ignore[no-untyped-def]
    """Each string literal of a module, f-strings with ``{}`` for what they format in."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def printed_commands() -> list[tuple[str, list[str]]]:
    """``(where, words)`` of every kimi-serve command line in the source's strings (prose after it cut off)."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        for line, text in _texts(path):
            for m in _COMMAND.finditer(text):
                words = []
                for w in m.group(1).split():
                    if w in _PROSE or w == "--":  # prose resumes; after `--` the words are another program's
                        break
                    words.append(w)
                if words:
                    found.append((f"{path.relative_to(SOURCE.parent)}:{line}", words))
    return found


def test_every_printed_command_parses() -> None:
    from kimi_serve.cli import app

    root = typer.main.get_command(app)
    checked, bad = 0, []
    for where, words in printed_commands():
        cmd = root.commands.get(words[0])  # type: ignore[attr-defined]
        if cmd is None:
            continue  # prose: "kimi-serve wrote ...", "kimi-serve bug"
        rest = words[1:]
        if hasattr(cmd, "commands"):  # a group: `patches apply`, `engine install`
            if not rest or "|" in rest[0] or rest[0] not in cmd.commands:
                if rest and "|" not in rest[0] and not rest[0].startswith(("{", "-")):
                    bad.append(f"{where}: {' '.join(words)}: no subcommand {rest[0]}")
                continue
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        options = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        checked += 1
        for i, w in enumerate(rest):
            if w.startswith("--") and w.split("=")[0] not in options:
                bad.append(f"{where}: {' '.join(words)}: {w.split('=')[0]} is not an option of it")
            if w == "--set" and i + 1 < len(rest) and "=" not in rest[i + 1] and rest[i + 1] != "{}":
                bad.append(f"{where}: {' '.join(words)}: --set takes KEY=VALUE")
    assert checked >= 80, checked  # the scan finds the fixes (a broken pattern finds none)
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------------------------- patch-set fixes


def shipped_with_patch_sets() -> list[str]:
    return [p.stem for p in sorted(CONFIGS.glob("*.yaml")) if load_profile(p.stem).patch_set]


@pytest.fixture
def engine(tmp_path: Path) -> tuple[str, Path]:
    """A scratch engine: a venv (no pip) whose site-packages holds the pinned wheel's files every shipped set touches,
    its version files and dist-info; ``(its python, its site-packages)``."""
    sets = [load_patch_set(name) for name in available_patch_sets()]
    venv = tmp_path / "engine"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    touched = tuple(sorted({f.path for ps in sets for f in ps.files}))
    extract(pinned_wheel(sets[0]), site, whole_package=False, extra=touched)
    return str(venv / "bin" / "python"), site.resolve()


def run_as_printed(command: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "KIMI_SERVE_SGLANG_PYTHON"}
    environ |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}",
        "KIMI_SERVE_STATE_DIR": str(tmp_path / "state"),
        **env,
    }
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=environ, timeout=300)


def the_command(fix: str) -> str:
    """The `kimi-serve patches apply ...` command inside a fix's prose."""
    m = re.search(r"kimi-serve patches apply[^)`;,]*", fix)
    assert m, fix
    return m.group(0).strip()


@pytest.mark.parametrize("name", shipped_with_patch_sets())
def test_the_patch_fixes_of_a_shipped_profile_are_one_command_that_applies_its_sets(
    name: str, engine: tuple[str, Path], tmp_path: Path, cli, monkeypatch
) -> None:
    """An SGLang profile (its python: moved to the scratch engine by --set): check's patch layer, doctor and up's
    preflight print one command, which applies both sets. A simulator profile (check skips its patch state): the
    SGLang is $KIMI_SERVE_SGLANG_PYTHON's, as up serves it, and `patches --profile` finds the same one."""
    from kimi_serve.check.patch_layer import check_patches
    from kimi_serve.host.facts import patch_state_finding

    python, site = engine
    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", str(tmp_path / "state"))
    simulator = load_profile(name).engine == "simulator"
    env = {"KIMI_SERVE_SGLANG_PYTHON": python} if simulator else {}
    overrides = [] if simulator else [f"python={python}"]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    p = load_profile(name, overrides)
    target = ["--profile", name, *(a for o in overrides for a in ("--set", o))]
    status = cli("patches", "status", *target, "--json")
    assert status.code == 1, status.err
    doc = json.loads(status.out)
    assert {s["site_packages"] for s in doc["sets"]} == {str(site)}  # the engine up would serve from
    listed = [f["fix"] for f in doc["findings"] if f["status"] == "fail"]
    expected = f"kimi-serve patches apply {' '.join(target)}"
    fixes = {the_command(f) for f in listed}
    assert fixes == {f"kimi-serve patches apply --site-packages {site} {' '.join(target)}"}
    if not simulator:
        check = [f for f in check_patches(p, offline=False) if f.status == FAIL]
        doctor = patch_state_finding(p, site, python=python, state_dir=None, layer="doctor", code="patch_set")
        assert check and doctor.status == FAIL
        printed = {the_command(f.fix) for f in check} | {the_command(doctor.fix)}
        assert printed == {expected}  # one spelling: check, doctor and up's preflight
    done = run_as_printed(expected, tmp_path, **env)
    assert done.returncode == 0, done.stderr
    assert cli("patches", "status", *target).code == 0
    if not simulator:
        assert all(f.status != FAIL for f in check_patches(p, offline=False))
    # `patches status`'s own fix names the site-packages it looked at: it runs as printed too (a no-op now)
    again = run_as_printed(fixes.pop(), tmp_path)
    assert again.returncode == 0 and "already" in again.stdout.lower(), (again.stdout, again.stderr)


def test_verify_advice_applies_to_the_engine_the_environment_names(engine: tuple[str, Path], tmp_path: Path) -> None:
    """verify's advice has no profile: its command applies the set it names to $KIMI_SERVE_SGLANG_PYTHON's SGLang,
    the interpreter up, doctor and check serve the simulator from (once `patches` ignored that variable)."""
    from kimi_serve.verify import agent_rules, leaks, parser_faults, stream

    python, site = engine
    texts = [str(v) for m in (agent_rules, leaks, parser_faults, stream) for v in vars(m).values()]
    commands = {the_command(t) for t in texts if "patches apply" in t}
    assert commands == {  # the Kimi set (parser faults, stream deltas); the SM120 set's 0007 (server_info leaks)
        "kimi-serve patches apply --patch-set sglang-0.5.23-kimi",
        "kimi-serve patches apply --patch-set sglang-0.5.23-sm120",
    }
    for command in sorted(commands):
        done = run_as_printed(command, tmp_path, KIMI_SERVE_SGLANG_PYTHON=python)
        assert done.returncode == 0, (command, done.stderr)
        assert str(site) in done.stdout, done.stdout


def test_patches_set_means_key_value(cli) -> None:
    """`patches --set NAME` (the old spelling) is a usage error naming --patch-set; --set KEY=VALUE overrides the
    profile's keys as in every other command."""
    for profile in ([], ["--profile", "prod"]):
        res = cli("patches", "status", *profile, "--set", "sglang-0.5.23-kimi")
        assert res.code == 2 and "use --patch-set sglang-0.5.23-kimi" in res.err and "KEY=VALUE" in res.err
        assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    res = cli("patches", "status", "--set", "server.port=1")
    assert res.code == 2 and "no --profile was given" in res.err


def test_patches_without_an_engine_names_the_variable_that_picks_it(cli, monkeypatch) -> None:
    """kimi-serve's own Python has no SGLang: `patches` says how to point it at the engine up would serve from."""
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)
    for args in (["patches", "status"], ["patches", "status", "--profile", "sim"]):
        res = cli(*args)
        assert res.code == 5 and "export KIMI_SERVE_SGLANG_PYTHON=" in res.err, res.err
        assert len(res.err.strip().splitlines()) == 1


def _leaf(words: list[str]):  # type: ignore[no-untyped-def]
    """The click command a command line names, and its own arguments."""
    from kimi_serve.cli import app

    cmd, rest = typer.main.get_command(app), words[1:]
    while hasattr(cmd, "commands") and rest and rest[0] in cmd.commands:
        cmd, rest = cmd.commands[rest[0]], rest[1:]
    return cmd, rest


SHIPPED = [p.stem for p in sorted(CONFIGS.glob("*.yaml"))]


@pytest.mark.usefixtures("loopback_port")  # doctor probes each profile's ports: the listener tier
@pytest.mark.parametrize("name", SHIPPED)
def test_the_fixes_check_and_doctor_print_here_parse_and_the_key_file_one_runs(
    name: str, cli, tmp_path: Path, monkeypatch
) -> None:
    """Each shipped profile, as check and doctor judge it on this host: every `kimi-serve ...` in a fix is a command
    line the CLI accepts (no usage error), and the key-file one, run as printed inside a scratch --root, makes a file
    check's own rules accept."""
    import shlex

    from typer._click.exceptions import UsageError

    from kimi_serve.check.host import check_api_key_file

    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", str(tmp_path / "state"))
    fixes = set()
    for args in (["check", "--offline"], ["check"], ["doctor"]):
        doc = json.loads(cli(*args, "-p", name, "--json").out)
        for f in doc["findings"]:
            fixes |= {m.group(0).strip() for m in re.finditer(r"kimi-serve [^)`;,]*", f.get("fix") or "")}
    for fix in sorted(fixes):
        words = shlex.split(fix)
        cmd, rest = _leaf(words)
        try:
            cmd.make_context(words[0], rest)  # parses the options as the command line would, runs nothing
        except UsageError as exc:
            pytest.fail(f"{name}: `{fix}` is a usage error: {exc}")
        if words[1] == "keyfile":
            root = tmp_path / "root"
            done = run_as_printed(f"{fix} --root {root}", tmp_path)
            assert done.returncode == 0, done.stderr
            path = load_profile(name).server.api_key_file
            assert path and check_api_key_file(str(root / path.lstrip("/")), load_profile(name)).status != FAIL
    if load_profile(name).server.api_key_file:
        assert any(f.startswith("kimi-serve keyfile") for f in fixes), fixes  # none here: the file is missing


@pytest.mark.usefixtures("loopback_port")  # doctor probes the profile's port: the listener tier
def test_the_engine_fix_is_the_readmes_and_runs_as_printed(cli, tmp_path: Path, monkeypatch) -> None:
    """A profile whose python: has no SGLang: check and doctor print the README's fix, `kimi-serve engine install`
    (once `pip install 'kimi-serve[serve]'`, an extra that does not exist), one spelling, naming the venv --set moved
    python: to; dry-run as printed, it plans that very venv."""
    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)  # check's SGLang tier (~12 s) is not the point here
    venv = tmp_path / "engine"
    fixes = []
    for command, code in (("check", "python"), ("doctor", "sglang")):  # the interpreter, its SGLang
        doc = json.loads(cli(command, "-p", "prod", "--set", f"python={venv}/bin/python", "--json").out)
        fixes += [f["fix"] for f in doc["findings"] if f["code"] == code]
    assert len(fixes) == 2 and not [f for f in fixes if "pip install" in f], fixes
    printed = {re.search(r"kimi-serve engine install[^)`;,]*", f).group(0).strip() for f in fixes}  # type: ignore[union-attr]
    assert printed == {f"kimi-serve engine install --profile prod --prefix {venv}"}
    done = run_as_printed(f"{printed.pop()} --dry-run", tmp_path)
    assert done.returncode == 0 and f"into {venv}\n" in done.stdout, (done.stdout, done.stderr)
    stale = [p for p in SOURCE.rglob("*.py") if "kimi-serve[serve]" in p.read_text(encoding="utf-8")]
    assert not stale, stale  # the old spelling is printed nowhere
