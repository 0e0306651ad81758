"""The client tier, everyday tasks: opencode with its own system prompt and tools, on the simulator with prod's flags.

Each task runs in a scratch project of its own (README.md, src/app.py), all at once against one simulator: reading
a file, listing files, explaining a file, finding a symbol, running a named command, a greeting, and one change the
user asks for. The call opencode executed (tool and arguments) must be the one the task needs, the answer shown
non-empty and free of Kimi's markup, and the project unchanged unless the task asked for a change. The decision
logic's fast-tier twin is tests/test_simulator_agent_tasks.py (opencode's tool schemas as a fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sim_pool import SGLangSession, start_keyed
from test_agent_clients import KEY, MARKUP, README, Outcome, opencode_config, prod_flags, run_opencode

APP = "def parse_config(path):\n    return {}\n"


@dataclass(frozen=True)
class Task:
    prompt: str
    calls: list[tuple[str, dict[str, Any]]]  # (tool, the arguments that must be as given)
    changes: dict[str, str]  # files the task asks to create, with their content


TASKS = {
    "read": Task("Open README.md and tell me its title", [("read", {"filePath": "README.md"})], {}),
    "list": Task("List the files in this directory", [("glob", {"pattern": "*"})], {}),
    "explain": Task("What does src/app.py do?", [("read", {"filePath": "src/app.py"})], {}),
    "find": Task("Find where parse_config is defined", [("grep", {"pattern": "parse_config"})], {}),
    "command": Task("Run `ls src`", [("bash", {"command": "ls src"})], {}),
    "greeting": Task("Say hello in one word", [], {}),
    "change": Task(
        "Create a file notes.txt with the content 'ship it'",
        [("write", {"filePath": "notes.txt", "content": "ship it"})],
        {"notes.txt": "ship it"},
    ),
}


def _snapshot(project: Path) -> dict[str, str]:
    return {str(p.relative_to(project)): p.read_text() for p in sorted(project.rglob("*")) if p.is_file()}


@dataclass
class Ran:
    outcome: Outcome
    before: dict[str, str]
    after: dict[str, str]


@pytest.fixture(scope="module")
def ran(
    agent_clients: Path, sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Ran]]:
    """Every task once, in parallel, against one simulator serving prod's flags."""
    work = tmp_path_factory.mktemp("agent-tasks")
    sim, port = start_keyed(sglang_session.python, prod_flags(), KEY, work)
    config = opencode_config(f"127.0.0.1:{port}")

    def one(name: str, task: Task) -> Ran:
        project = work / name / "project"
        (project / "src").mkdir(parents=True)
        (project / "src" / "app.py").write_text(APP)
        (project / "README.md").write_text(README)  # run_opencode writes it too (and opencode.json): the same text
        before = _snapshot(project)
        outcome = run_opencode(agent_clients, work / name / "home", project, config, task.prompt)
        return Ran(outcome, before, {k: v for k, v in _snapshot(project).items() if k != "opencode.json"})

    try:
        sim.wait_ready(240)
        with ThreadPoolExecutor(max_workers=len(TASKS)) as pool:
            jobs = {name: pool.submit(one, name, task) for name, task in TASKS.items()}
            results = {name: job.result() for name, job in jobs.items()}
    finally:
        sim.stop()
    yield results


@pytest.mark.parametrize("name", list(TASKS))
def test_opencode_makes_the_one_right_call_and_changes_only_what_was_asked(ran: dict[str, Ran], name: str) -> None:
    task, r = TASKS[name], ran[name]
    o = r.outcome
    assert o.error is None, o.raw[-2000:]
    assert [c["name"] for c in o.calls] == [n for n, _ in task.calls], o.raw[-2000:]
    for call, (_, wanted) in zip(o.calls, task.calls, strict=True):
        args = call["arguments"] or {}
        assert {k: args.get(k) for k in wanted} == wanted, o.raw[-2000:]
    assert o.answers and all(a.strip() and not MARKUP.search(a) for a in o.answers), o.raw[-2000:]
    assert r.after == {**r.before, **task.changes}  # nothing else created, changed or deleted


def test_the_answer_uses_what_the_tool_returned(ran: dict[str, Ran]) -> None:
    assert any("Client Tier Project" in a for a in ran["read"].outcome.answers), ran["read"].outcome.raw[-2000:]
