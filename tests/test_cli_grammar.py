"""One CLI grammar: usage errors are the same one line as every other error (exit 2), --debug in any position, -p
everywhere, each --help lists the command's exit codes (the same table as docs/exit-codes.md), shell completion,
up --quiet."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_serve.commands.exit_codes import EXIT_CODES, codes_of
from kimi_serve.up.console import Console

REPO = Path(__file__).resolve().parent.parent


def _one_line(res, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert res.code == code, (res.code, res.out, res.err)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.err and "╭" not in res.err, res.err
    return lines[0]


@pytest.mark.parametrize(
    "args, golden",
    [
        (
            ["check", "--bogus"],
            "kimi-serve: error: kimi-serve check: No such option: --bogus (fix: see 'kimi-serve check --help')",
        ),
        (["nocmd"], "kimi-serve: error: kimi-serve: No such command 'nocmd'. (fix: see 'kimi-serve --help')"),
        (
            ["render"],
            "kimi-serve: error: kimi-serve render: Missing option '--profile' / '-p'. "
            "(fix: see 'kimi-serve render --help')",
        ),
        (
            ["simulate", "-p", "sim", "--port", "99999"],
            "kimi-serve: error: kimi-serve simulate: Invalid value for '--port': Input should be less than or equal to "
            "65535 (fix: pass an integer 1..65535 to --port)",
        ),
        (
            ["simulate", "-p", "sim", "--port", "http"],
            "kimi-serve: error: kimi-serve simulate: Invalid value for '--port': Input should be a valid integer, unable to "
            "parse string as an integer (fix: pass an integer 1..65535 to --port)",
        ),
    ],
)
def test_usage_errors_are_one_golden_line(cli, args, golden) -> None:
    assert _one_line(cli(*args)) == golden


@pytest.mark.parametrize(
    "args",
    [
        ["--debug", "render", "-p", "x/none.yaml"],
        ["render", "--debug", "-p", "x/none.yaml"],
        ["render", "-p", "x/none.yaml", "--debug"],
    ],
)
def test_debug_in_any_position(cli, args) -> None:
    res = cli(*args)
    assert res.code == 2 and "Traceback" in res.err and "does not exist" in res.err


@pytest.mark.parametrize(
    "command",
    [
        "show",
        "render",
        "check",
        "up",
        "doctor",
        "install-service",
        "uninstall-service",
        "restart",
        "status",
        "simulate",
    ],
)
def test_dash_p_everywhere(cli, command) -> None:
    res = cli(command, "-p", "nosuchprofile")
    assert "No such option" not in res.err and "no profile named 'nosuchprofile'" in res.err, res.err


def _help_text(cli, words: list[str]) -> str:  # type: ignore[no-untyped-def]
    res = cli(*words, "--help")
    assert res.code == 0, res.err
    return re.sub(r"[\s│]+", " ", res.out)


@pytest.mark.parametrize("command", sorted(EXIT_CODES))
def test_help_lists_the_exit_codes(cli, command) -> None:
    text = _help_text(cli, command.split())
    assert f"Exit codes: {EXIT_CODES[command]}" in text, text
    assert text.count("Exit codes") == 1, text  # once: the footer, not the docstring too
    footer = text.split("Exit codes: ")[1].split(" (docs/exit-codes.md).")[0]
    codes = codes_of(footer)
    assert len(codes) == len(set(codes)) and {"2", "70", "130"} <= set(codes), footer  # each code once, all common
    assert "<bool>" not in text, text  # a flag takes no value: no type shown for it


@pytest.mark.parametrize(
    ("command", "verb"),
    [("install-service", "Install under"), ("uninstall-service", "Remove the unit"), ("status", "Read the unit")],
)
def test_root_help_says_what_the_command_does_there(cli, command, verb) -> None:
    text = _help_text(cli, [command])
    assert f"--root <path> {verb}" in text, text


def test_docs_exit_code_table_is_the_help_table() -> None:
    doc = (REPO / "docs" / "exit-codes.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z -]+)` \| (.+) \|$", doc, re.M))
    assert rows == EXIT_CODES


def test_shell_completion_is_offered(cli, tmp_path) -> None:
    text = _help_text(cli, [])
    assert "--install-completion" in text and "--show-completion" in text
    # Typer finds the shell from the process tree: run it from bash, as a user does (under xdist the nearest shell
    # can be too far up for it to find)
    script = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m kimi_serve --show-completion; exit $?'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert script.returncode == 0 and "complete" in script.stdout and "kimi-serve" in script.stdout
    env = {
        "_KIMI_SERVE_COMPLETE": "complete_bash",
        "COMP_WORDS": "kimi-serve chec",
        "COMP_CWORD": "1",
        "PATH": "/usr/bin:/bin",
    }
    words = subprocess.run(
        [str(Path(sys.executable).parent / "kimi-serve")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert words.stdout.split() == ["check"], (words.stdout, words.stderr)


def test_quiet_console_hides_server_lines_but_not_kimi_serves() -> None:
    out = io.StringIO()
    quiet = Console(out=out, err=out, tty=False, echo_server=False)
    quiet.server_line("[2026-01-01] server_args=ServerArgs(" + "x" * 20000 + ")")
    quiet.server_line('INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK')
    quiet.info("[ready] the server is ready")
    assert out.getvalue() == "kimi-serve up: [ready] the server is ready\n"


def test_up_takes_quiet(cli) -> None:
    res = cli("up", "-p", "nosuchprofile", "--quiet")
    assert "No such option" not in res.err and "no profile named" in res.err
