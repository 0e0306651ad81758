"""Every number option of every command takes finite numbers only: `nan`, `inf`, `-inf` and `1e400` (a float that
overflows to inf) end in exit 2 and one line naming the option, from parsing alone, before the command runs
(docs/exit-codes.md). The commands and their options are read from the Typer app itself, so a new option is covered
the day it is added. The simulator's numeric knobs from the environment (KIMI_SERVE_SIM_*) are held the same way."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer._click.exceptions import UsageError

from kimi_serve.cli import app
from kimi_serve.core.settings import SIM_BOUNDS, SIM_PERF_ENV
from kimi_serve.simulator import server

NON_FINITE = ["nan", "inf", "-inf", "1e400"]


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in sorted(subs.items()):
            yield from _commands(sub, (*path, name))
    else:
        yield path, cmd


def _is_number(param: Any) -> bool:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return annotation in (int, float) or (
        typing.get_origin(annotation) is list and typing.get_args(annotation)[0] in (int, float)
    )


def _number_options() -> list[tuple[tuple[str, ...], str]]:
    found = [
        (path, max(param.opts, key=len))
        for path, cmd in _commands(typer.main.get_command(app))
        for param in cmd.params
        if getattr(param, "param_type_name", "") == "option" and _is_number(param)
    ]
    return found


OPTIONS = _number_options()


def test_the_walk_finds_the_known_float_options() -> None:
    found = {(" ".join(path), opt) for path, opt in OPTIONS}
    assert {
        ("wait-router", "--wait"),
        ("simulate", "--warmup"),
        ("bench", "--speedup"),
        ("verify", "--timeout"),
    } <= found


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(("path", "option"), OPTIONS, ids=[f"{' '.join(p)} {o}" for p, o in OPTIONS])
def test_a_number_option_refuses_a_non_finite_value(cli: Any, path: tuple[str, ...], option: str, value: str) -> None:
    args = [f"{option}={value}"]
    cmd = typer.main.get_command(app)
    for word in path:
        cmd = cmd.commands[word]
    # parsing alone rejects it, for this option (a command whose other options are missing is not run either way)
    with pytest.raises(UsageError) as raised:
        cmd.make_context(" ".join(path), list(args))
    assert option in getattr(raised.value.param, "opts", []), raised.value.format_message()
    res = cli(*path, *args)
    assert res.code == 2, (res.code, res.out, res.err)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    assert f"Invalid value for '{option}'" in lines[0] and f"to {option}" in lines[0], lines[0]


@pytest.mark.parametrize("value", [*NON_FINITE, "soon", "-1"])
@pytest.mark.parametrize("name", sorted(SIM_BOUNDS))
def test_a_simulator_knob_from_the_environment_is_a_finite_number(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    """The simulator process refuses a bad KIMI_SERVE_SIM_* number at once, in one line naming it (exit 2): never a
    traceback, a clock that sleeps NaN, or a load that never ends."""
    monkeypatch.setenv(name, value)
    assert server.main(["--model-path", "unused"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kimi-serve simulator: error: {name}: "), lines
    assert f"is not a finite number {SIM_BOUNDS[name][0]:g}..{SIM_BOUNDS[name][1]:g}" in lines[0], lines


@pytest.mark.parametrize("perf", ['{"per_token_ms": NaN}', '{"per_token_ms": 1e400}', '{"accept_length": "inf"}'])
def test_a_non_finite_performance_model_parameter_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], perf: str
) -> None:
    monkeypatch.setenv(SIM_PERF_ENV, perf)
    assert server.main(["--model-path", "unused"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"kimi-serve simulator: error: {SIM_PERF_ENV}: invalid performance model parameters: every value must be a "
        "finite number"
    ]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["logs", "--lines", "1000001"], "--lines"),
        (["wait-joined", "--leader", "127.0.0.1:1", "--port", "1", "--pid", str(10**20)], "--pid"),
    ],
)
def test_an_integer_option_with_a_natural_bound_refuses_past_it(cli: Any, args: list[str], option: str) -> None:
    """No process id is above Linux's PID_MAX_LIMIT (4194304); a million history lines is past any use: exit 2 and
    one line naming the option, not a search for process 10**20."""
    res = cli(*args)
    assert res.code == 2, (res.code, res.out, res.err)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"Invalid value for '{option}" in lines[0], res.err
