"""Issue 44 over real HTTP: the simulator started with prod's exact SGLang flags (the profile's argv, as `simulate
--profile prod` runs it) in the CPU SGLang venv, driven on loopback.

- A request that forbids a change gets no change: "Don't delete main.py, just show it to me" with opencode-style tools
  comes back from SGLang's own serving layer and kimi_k2 parser as one ``read`` call.
- A tool schema cannot wedge it: while a request whose schema has no bounded instance (a binary ``$ref`` tree,
  ``minLength: 1e9``, ``minItems: 1e9``) is in flight, ``/health`` keeps answering; the request ends in bounded time
  with SGLang's 400 naming the tool; a 16k-member enum gets its call; SIGTERM stops the server mid-request.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_pool import SGLangSession

from kimi_serve.core.settings import SIM_STEP_ENV
from kimi_serve.profile.launch import server_args_of
from kimi_serve.profile.loader import load_profile
from kimi_serve.simulator import launcher

KEY = "hostile-test-key"
MODEL = "kimi-k2.5"
S = {"type": "string"}


def _fn(name: str, props: dict[str, Any], required: list[str], description: str) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


AGENT_TOOLS = [  # opencode's naming: read, write, edit, bash, grep, glob, plus delete_file and list
    _fn("read", {"filePath": S}, ["filePath"], "Reads a file from the local filesystem."),
    _fn("write", {"filePath": S, "content": S}, ["filePath", "content"], "Writes a file to the local filesystem."),
    _fn("edit", {"filePath": S, "oldString": S, "newString": S}, ["filePath", "oldString", "newString"], "Edits."),
    _fn("bash", {"command": S}, ["command"], "Executes a given bash command."),
    _fn("grep", {"pattern": S}, ["pattern"], "Searches file contents."),
    _fn("glob", {"pattern": S}, ["pattern"], "Finds files by pattern."),
    _fn("delete_file", {"path": S}, ["path"], "Delete a file from the project."),
    _fn("list", {"path": S}, ["path"], "List the entries of a directory."),
]
TREE = {
    "$defs": {
        "n": {
            "type": "object",
            "properties": {"l": {"$ref": "#/$defs/n"}, "r": {"$ref": "#/$defs/n"}},
            "required": ["l", "r"],
        }
    },
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/n"}},
    "required": ["root"],
}
SLOW_TREE = {  # every node validated against a 16k-member enum too: the generator runs until its deadline (3 s)
    "$defs": {
        "n": {
            "type": "object",
            "properties": {
                "l": {"$ref": "#/$defs/n"},
                "r": {"$ref": "#/$defs/n"},
                "e": {"enum": [f"v{i}" for i in range(16384)]},
            },
            "required": ["e", "l", "r"],
        }
    },
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/n"}},
    "required": ["root"],
}
HOSTILE = {
    "binary-ref-tree": TREE,
    "ref-tree-with-16k-enums-until-the-deadline": SLOW_TREE,
    "minLength-1e9": {"type": "object", "properties": {"s": {"type": "string", "minLength": 10**9}}, "required": ["s"]},
    "minItems-1e9": {"type": "object", "properties": {"a": {"type": "array", "minItems": 10**9}}, "required": ["a"]},
}


@pytest.fixture(scope="module")
def prod(sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[launcher.Simulator]:
    """Its own server with prod's flags (the last test stops it with SIGTERM)."""
    tmp = tmp_path_factory.mktemp("sim-hostile")
    secrets = tmp / "secrets.yaml"
    secrets.write_text(f"api-key: {KEY}\n")
    secrets.chmod(0o600)
    profile_path = tmp / "prod-hostile.yaml"
    profile_path.write_text(f"extends: prod\nserver:\n  api_key_file: {secrets}\n")
    port = launcher.free_port()
    args = launcher.with_flag(server_args_of(load_profile(str(profile_path)), port), "--host", "127.0.0.1")
    assert "--tool-call-parser" in args and "--speculative-algorithm" in args  # prod's flags, not a test's
    env = launcher.environment(warmup=0.0)
    env[SIM_STEP_ENV] = "0.001"
    sim = launcher.Simulator.start(launcher.command(sglang_session.python, args), env, f"http://127.0.0.1:{port}",
                                   Path(tmp / "simulator.log"))  # fmt: skip
    try:
        sim.wait_ready(240)
        yield sim
    finally:
        sim.stop()


def _chat(sim: launcher.Simulator, body: dict[str, Any], timeout: float = 120) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        sim.base_url + "/v1/chat/completions",
        data=json.dumps({"model": MODEL, "max_tokens": 2048, **body}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _health(sim: launcher.Simulator) -> tuple[int, float]:
    started = time.monotonic()
    with urllib.request.urlopen(sim.base_url + "/health", timeout=10) as resp:
        return resp.status, time.monotonic() - started


def test_a_request_that_forbids_the_delete_gets_a_read_through_sglang(prod: launcher.Simulator) -> None:
    user = {"role": "user", "content": "Don't delete main.py, just show it to me"}
    status, body = _chat(prod, {"messages": [user], "tools": AGENT_TOOLS})
    assert status == 200, body
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in body["choices"][0]["message"]["tool_calls"]
    ]
    assert calls == [("read", {"filePath": "main.py"})]
    status, body = _chat(prod, {"messages": [{"role": "user", "content": "Delete main.py"}], "tools": AGENT_TOOLS})
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in body["choices"][0]["message"]["tool_calls"]
    ]
    assert status == 200 and calls == [("delete_file", {"path": "main.py"})]  # asked for: still done


def _in_flight(
    sim: launcher.Simulator, schema: dict[str, Any], stream: bool = False
) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}
    tool = {"type": "function", "function": {"name": "submit", "description": "Submit", "parameters": schema}}
    body = {"messages": [{"role": "user", "content": "Call submit"}], "tools": [tool], "tool_choice": "required"}

    def run() -> None:
        started = time.monotonic()
        try:
            result["status"], result["body"] = _chat(sim, {**body, "stream": stream}, timeout=60)
        except Exception as exc:  # noqa: BLE001 - a reset or a timeout is the finding, reported by the test
            result["error"] = repr(exc)
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


@pytest.mark.parametrize("case, stream", [*((case, False) for case in HOSTILE), ("binary-ref-tree", True)])
def test_health_answers_while_a_hostile_schema_is_in_flight_and_it_ends_with_a_400(
    prod: launcher.Simulator, case: str, stream: bool
) -> None:
    thread, result = _in_flight(prod, HOSTILE[case], stream)
    health: list[tuple[int, float]] = []
    while thread.is_alive() and len(health) < 200:
        health.append(_health(prod))
        time.sleep(0.05)
    thread.join(60)
    assert not thread.is_alive() and "error" not in result, result
    assert result["status"] == 400, result
    assert "tool 'submit'" in result["body"]["message"] and "cannot write arguments" in result["body"]["message"]
    assert result["seconds"] < 30, result  # the generator's own bound (3 s) plus the serving layer's work
    assert health and all(code == 200 for code, _ in health), health
    # the event loop never waited on the generator (on it, /health waited up to the whole 3 s of the slow tree)
    assert max(seconds for _, seconds in health) < 1.5, health
    assert _chat(prod, {"messages": [{"role": "user", "content": "Hello!"}]})[0] == 200  # serving on


def test_a_16k_member_enum_gets_its_call(prod: launcher.Simulator) -> None:
    members = [f"v{i}" for i in range(16384)]
    schema = {"type": "object", "properties": {"e": {"type": "string", "enum": members}}, "required": ["e"]}
    thread, result = _in_flight(prod, schema)
    health = []
    while thread.is_alive():
        health.append(_health(prod))
        time.sleep(0.05)
    assert result.get("status") == 200, result
    (call,) = result["body"]["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"e": "v0"}
    assert all(code == 200 for code, _ in health), health


def test_sigterm_stops_the_server_while_a_hostile_schema_is_in_flight(prod: launcher.Simulator) -> None:
    thread, _ = _in_flight(prod, TREE, stream=True)
    time.sleep(0.5)
    started = time.monotonic()
    code = prod.stop(timeout=30)
    assert time.monotonic() - started < 15 and code == 0, (code, prod.log_tail())
    thread.join(60)
