"""The scripted model on real agents' tool sets (simulator/tasks.py): the one call a model would make, and nothing
destructive by surprise.

opencode's tools come from tests/clients/opencode_tools.json (its captured request reduced to the tool schemas; the
client tier, tests/test_agent_clients.py, runs opencode itself). The second tool set is written here in another
agent's naming style (PascalCase tools, snake_case parameters, a sub-agent tool) to show the choice does not hang on
one client's spelling.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.simulator.model import THINK_END, Turn, generate

OPENCODE = json.loads((Path(__file__).parent / "clients" / "opencode_tools.json").read_text())["tools"]
CALL = re.compile(
    r"<\|tool_call_begin\|>functions\.([\w.-]+):\d+<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.S
)
SYSTEM = {"role": "system", "content": "You are a coding agent working in the user's project. " * 200}


def _fn(name: str, props: dict[str, Any], required: list[str], description: str) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


_S = {"type": "string"}
OTHER_AGENT = [
    _fn("Task", {"description": _S, "prompt": _S, "subagent_type": _S}, ["description", "prompt", "subagent_type"],
        "Launch a new agent to handle complex, multi-step tasks autonomously. Use it to read files and search code."),
    _fn("Bash", {"command": _S, "timeout": {"type": "number"}}, ["command"], "Executes a given bash command."),
    _fn("Glob", {"pattern": _S, "path": _S}, ["pattern"], "Fast file pattern matching; returns matching file paths."),
    _fn("Grep", {"pattern": _S, "path": _S, "output_mode": {"type": "string", "enum": ["content", "files_with_matches"]}},
        ["pattern", "output_mode"], "Search file contents with regular expressions."),
    _fn("Read", {"file_path": _S, "offset": {"type": "integer"}}, ["file_path"], "Reads a file from the filesystem."),
    _fn("Edit", {"file_path": _S, "old_string": _S, "new_string": _S}, ["file_path", "old_string", "new_string"],
        "Performs exact string replacements in files."),
    _fn("Write", {"file_path": _S, "content": _S}, ["file_path", "content"], "Writes a file to the filesystem."),
    _fn("TodoWrite", {"todos": {"type": "array", "items": _S}}, ["todos"], "Create and manage a task list."),
    _fn("WebFetch", {"url": {"type": "string", "format": "uri"}, "prompt": _S}, ["url", "prompt"], "Fetch a URL."),
]  # fmt: skip
CHANGES = {"write", "edit", "bash", "task", "todowrite", "Write", "Edit", "Bash", "Task", "TodoWrite"}


def calls(prompt: str, tools: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    text = generate(Turn([SYSTEM, {"role": "user", "content": prompt}], tools))
    return [(name, json.loads(args)) for name, args in CALL.findall(text)]


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ("Open README.md and tell me its title", ("read", {"filePath": "README.md"})),
        ("Read README.md and tell me its title.", ("read", {"filePath": "README.md"})),
        ("Open README.md, then tell me what it says.", ("read", {"filePath": "README.md"})),
        ("What does src/app.py do?", ("read", {"filePath": "src/app.py"})),
        ("Explain main.py to me", ("read", {"filePath": "main.py"})),
        ("What's in package.json?", ("read", {"filePath": "package.json"})),
        ("Show me the Makefile", ("read", {"filePath": "Makefile"})),
        ("Can you read the README and summarize it?", ("read", {"filePath": "README.md"})),
        ("Give me an overview of src/app.py", ("read", {"filePath": "src/app.py"})),
        ("How many lines does README.md have?", ("read", {"filePath": "README.md"})),
        ("List the files in this directory", ("glob", {"pattern": "*"})),
        ("Could you list all the Python files?", ("glob", {"pattern": "**/*.py"})),
        ("Show me what's in the src folder", ("glob", {"pattern": "*", "path": "src"})),
        ("What files are in this project?", ("glob", {"pattern": "*"})),
        ("Show me the files in src/", ("glob", {"pattern": "*", "path": "src/"})),
        ("Find where parse_config is defined", ("grep", {"pattern": "parse_config"})),
        ("Find the function loadSettings", ("grep", {"pattern": "loadSettings"})),
        ("Search for `TODO` in the code", ("grep", {"pattern": "TODO"})),
        ("Run `git status`", ("bash", {"command": "git status"})),
        ("Run ls -la", ("bash", {"command": "ls -la"})),
        ("Fetch https://example.com/docs and summarise it", ("webfetch", {"url": "https://example.com/docs"})),
    ],
)
def test_opencode_gets_the_one_call_that_does_the_job(prompt: str, expected: tuple[str, dict[str, Any]]) -> None:
    name, args = expected
    ((got_name, got),) = calls(prompt, OPENCODE)
    assert got_name == name and {k: got.get(k) for k in args} == args, (got_name, got)
    assert not any(str(v).startswith("example ") for v in got.values())  # no placeholder passing for a value


@pytest.mark.parametrize(
    "prompt",
    [
        "Say hello in one word",
        "Hello!",
        "Thanks, that's all.",
        "What is the capital of France?",
        "Why is the sky blue?",
        "Tell me a joke",
        "Explain how a hash map works",
    ],
)
def test_greetings_and_knowledge_questions_get_no_call(prompt: str) -> None:
    assert calls(prompt, OPENCODE) == []
    assert calls(prompt, OTHER_AGENT) == []


@pytest.mark.parametrize(
    "prompt",
    [
        "Open README.md and tell me its title",
        "List the files in this directory",
        "What does main.py do?",
        "Find where parse_config is defined",
        "Is there a test for the config loader?",
        "Summarise this project for me",
        "Run the tests",  # no command named: nothing is run on a guess
        "Fix the bug in main.py",  # a change it cannot spell out: it reads first
    ],
)
def test_questions_never_write_edit_run_or_delegate(prompt: str) -> None:
    for tools in (OPENCODE, OTHER_AGENT):
        found = calls(prompt, tools)
        assert len(found) <= 1 and not {n for n, _ in found} & CHANGES, found


def test_a_request_sent_in_quotes_is_the_request() -> None:
    """opencode run sends the user's message wrapped in double quotes."""
    assert calls("\"Create a file notes.txt with the content 'ship it'\"", OPENCODE) == [
        ("write", {"filePath": "notes.txt", "content": "ship it"})
    ]
    assert calls('"Read README.md and tell me its title."', OPENCODE) == [("read", {"filePath": "README.md"})]


def test_changes_and_commands_only_when_asked_with_the_values_asked_for() -> None:
    assert calls("Create a file hello.txt with the content 'hi there'", OPENCODE) == [
        ("write", {"filePath": "hello.txt", "content": "hi there"})
    ]
    assert calls("In config.py replace 'DEBUG = True' with 'DEBUG = False'", OPENCODE) == [
        ("edit", {"filePath": "config.py", "oldString": "DEBUG = True", "newString": "DEBUG = False"})
    ]
    assert calls("Delete old.log", OPENCODE) == [("bash", {"command": "rm old.log"})]


def test_another_agents_naming_style_gets_the_same_choices() -> None:
    assert calls("Open README.md", OTHER_AGENT) == [("Read", {"file_path": "README.md"})]  # not the sub-agent
    assert calls("List the files", OTHER_AGENT) == [("Glob", {"pattern": "*"})]
    ((name, args),) = calls("Find where parse_config is defined", OTHER_AGENT)
    assert name == "Grep" and args["pattern"] == "parse_config"
    assert args["output_mode"] in ("content", "files_with_matches")  # a required enum: from the schema
    assert calls("Run `pytest -q`", OTHER_AGENT) == [("Bash", {"command": "pytest -q"})]


def test_one_call_per_thing_asked_for_in_one_turn() -> None:
    assert calls("Read a.py and b.py", OPENCODE) == [("read", {"filePath": "a.py"}), ("read", {"filePath": "b.py"})]
    assert calls("List the files, then open setup.cfg", OPENCODE) == [
        ("glob", {"pattern": "*"}),
        ("read", {"filePath": "setup.cfg"}),
    ]


WEATHER = _fn("get_weather", {"city": _S}, ["city"], "Get the current weather for a city")


def test_a_follow_up_request_gets_its_own_call_and_a_result_gets_an_answer() -> None:
    first = [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}]
    call = {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    history = [
        *first,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "Paris: sunny, 21 C"},
    ]
    answer = generate(Turn(history, [WEATHER])).partition(THINK_END)[2]
    assert "Paris: sunny, 21 C" in answer and not CALL.search(answer)
    later = [*history, {"role": "assistant", "content": answer}, {"role": "user", "content": "And in Tokyo?"}]
    assert [(n, json.loads(a)) for n, a in CALL.findall(generate(Turn(later, [WEATHER])))] == [
        ("get_weather", {"city": "Tokyo"})
    ]
    thanks = [*later[:-1], {"role": "user", "content": "Thanks!"}]
    assert not CALL.search(generate(Turn(thanks, [WEATHER])))


def test_a_tool_error_gets_an_answer_that_says_so() -> None:
    call = {"id": "c0", "type": "function", "function": {"name": "read", "arguments": '{"filePath": "nope.md"}'}}
    history = [
        {"role": "user", "content": "Open nope.md"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "Error: File not found: /project/nope.md"},
    ]
    text = generate(Turn(history, OPENCODE))
    assert not CALL.search(text) and "failed" in text.partition(THINK_END)[2]


def test_a_required_value_the_request_does_not_give_comes_from_the_schema_not_a_placeholder() -> None:
    ((name, args),) = calls("Use the task tool to review the repo", OPENCODE)  # named: the sub-agent may be used
    assert name == "task" and not any(str(v).startswith("example") for v in args.values()), args
    fmt = _fn("convert", {"unit": {"type": "string", "default": "celsius"}, "note": _S}, ["unit", "note"], "Convert")
    ((_, args),) = calls("Call convert", [fmt])
    assert args == {"unit": "celsius", "note": ""}


# Issue 44: a change (delete, write, edit, run) only when the request asks for it in the affirmative. opencode's tools
# plus a delete tool and a list tool of their own, as other agents offer them.
WITH_DELETE = [
    *OPENCODE,
    _fn("delete_file", {"path": _S}, ["path"], "Delete a file from the project."),
    _fn("list", {"path": _S}, ["path"], "List the entries of a directory."),
]
PLAIN = [  # a few plain tools, no agent: decision.py's word matching chooses
    _fn("read_file", {"path": _S}, ["path"], "Read a file"),
    _fn("write_file", {"path": _S, "content": _S}, ["path", "content"], "Write content to a file"),
    _fn("delete_file", {"path": _S}, ["path"], "Delete a file"),
]
CHANGING = {"write", "edit", "bash", "delete_file", "write_file", "Write", "Edit", "Bash"}
READ_ONLY = {"read", "glob", "grep", "list", "read_file", "Read", "Glob", "Grep"}
NOT_ASKED = [
    # the issue's cases, word for word
    "Don't delete main.py, just show it to me",
    "Never overwrite data.csv",
    "Should I run `rm -rf /`?",
    "Don't run `make deploy` yet, first show me the Makefile",
    "Find where we remove users in auth.py",
    "Can I safely remove old.py?",
    "Tell me what `rm -rf node_modules` would delete",
    # negations
    "Do not delete main.py",
    "don’t delete main.py",
    "Please don't remove old.py",
    "Never run `git push --force`",
    "Without deleting anything, list the files",
    "Instead of deleting old.py, show it to me",
    "Rather than running `make clean`, show me the Makefile",
    "No need to run `pytest`, just read tests/test_a.py",
    "You must not overwrite config.yaml",
    "Avoid editing settings.py",
    "Don't write to notes.txt",
    "不要删除 main.py",
    # questions about an action
    "Should I delete build.log?",
    "Can I remove old.py and new.py?",
    "Is it safe to delete build/?",
    "Is it ok to run `npm install` here?",
    "What's the command to delete all .pyc files?",
    "What would `rm -rf build` delete?",
    "How do I remove old.py?",
    "How do I run `pytest` with coverage?",
    "Should we overwrite data.csv with the new export?",
    "Why would we delete utils.py?",
    "Shall I remove old.py?",
    "Do you think I should delete old.py?",
    "Is old.py safe to delete?",
    "If I delete old.py, will anything break?",
    "What happens if I run `make clean`?",
    "Is there a way to run `make test`?",
    "可以删除 main.py 吗？",
    "I don't want you to delete main.py",
    "DON'T DELETE main.py",
    "Do NOT run `rm -rf /`",
    "Before you delete old.py, show it to me",
    "Don't, whatever happens, delete main.py",
    "Never, ever, run `rm -rf /`",
    "Delete nothing",
    # searches and explanations
    "Explain what `git reset --hard` does",
    "Find where we delete sessions",
    "Search for the code that removes temp files",
    "Tell me which files `make clean` would remove",
    "Explain why main.py deletes the cache",
    "Show me where we write the log file",
]
ASKED = [
    ("Delete main.py", ("delete_file", "path", "main.py")),
    ("Remove old.py", ("delete_file", "path", "old.py")),
    ("Please delete build.log", ("delete_file", "path", "build.log")),
    ("Can you delete old.py?", ("delete_file", "path", "old.py")),
    ("Could you please remove tmp.txt", ("delete_file", "path", "tmp.txt")),
    ("Don't touch main.py, just delete old.py", ("delete_file", "path", "old.py")),
    ("Run `make deploy`", ("bash", "command", "make deploy")),
    ("Please run `rm -rf build`", ("bash", "command", "rm -rf build")),
    ("Can you run `git status`?", ("bash", "command", "git status")),
    ("Don't run the tests, just run `make lint`", ("bash", "command", "make lint")),
    ("Overwrite data.csv with 'a,b'", ("write", "content", "a,b")),
    ("Create a file hello.txt with the content 'hi there'", ("write", "filePath", "hello.txt")),
    ("In config.py replace 'DEBUG = True' with 'DEBUG = False'", ("edit", "newString", "DEBUG = False")),
    ("Open README.md, then delete old.log", ("delete_file", "path", "old.log")),
    ("Don't forget to delete tmp.txt", ("delete_file", "path", "tmp.txt")),
    ("Make sure to delete tmp.txt", ("delete_file", "path", "tmp.txt")),
    ("Would you delete old.py?", ("delete_file", "path", "old.py")),
    ("Delete old.py, but don't delete main.py", ("delete_file", "path", "old.py")),
    ("Remember to run `git status`", ("bash", "command", "git status")),
    ("删除 main.py", ("delete_file", "path", "main.py")),
    ("请删除 old.py", ("delete_file", "path", "old.py")),
    ("No, delete old.py", ("delete_file", "path", "old.py")),
    ("OK, delete old.py", ("delete_file", "path", "old.py")),
]


@pytest.mark.parametrize("prompt", NOT_ASKED)
def test_a_change_not_asked_for_gets_a_read_only_call_or_an_answer(prompt: str) -> None:
    for tools in (WITH_DELETE, OPENCODE, OTHER_AGENT, PLAIN):
        found = calls(prompt, tools)
        assert {n for n, _ in found} <= READ_ONLY, (tools[0]["function"]["name"], found)


@pytest.mark.parametrize("prompt, expected", ASKED)
def test_a_change_asked_for_still_gets_its_call(prompt: str, expected: tuple[str, str, str]) -> None:
    name, key, value = expected
    found = calls(prompt, WITH_DELETE)
    assert any(n == name and args.get(key) == value for n, args in found), found
    assert {n for n, _ in found} - {name} <= READ_ONLY, found  # nothing else changed on the way


def test_the_issue_cases_get_the_read_only_call_they_ask_for() -> None:
    assert calls("Don't delete main.py, just show it to me", WITH_DELETE) == [("read", {"filePath": "main.py"})]
    assert calls("Don't run `make deploy` yet, first show me the Makefile", WITH_DELETE) == [
        ("read", {"filePath": "Makefile"})
    ]
    assert calls("Never overwrite data.csv", WITH_DELETE) == [("read", {"filePath": "data.csv"})]
    assert calls("Tell me what `rm -rf node_modules` would delete", WITH_DELETE) == []
    assert calls("Should I run `rm -rf /`?", WITH_DELETE) == []
    assert calls("Don't delete main.py, just show it to me", PLAIN) == [("read_file", {"path": "main.py"})]
    assert calls("Delete main.py", PLAIN) == [("delete_file", {"path": "main.py"})]  # asked: still done


# kimi-cli's real request (tests/clients/kimi_cli_request.json: kimi-cli 1.51.0's body, its system prompt left out):
# 15 tools, among them a question tool (AskUserQuestion), a sub-agent (Agent), a to-do list (SetTodoList), background
# tasks (TaskList, TaskOutput, TaskStop) and plan mode (EnterPlanMode, ExitPlanMode).
KIMI_CLI_REQUEST = json.loads((Path(__file__).parent / "clients" / "kimi_cli_request.json").read_text())
KIMI_CLI = KIMI_CLI_REQUEST["tools"]
UNASKED = {"AskUserQuestion", "Agent", "SetTodoList", "TaskList", "TaskOutput", "TaskStop", "EnterPlanMode"}


@pytest.mark.parametrize(
    "prompt, expected",
    [
        (KIMI_CLI_REQUEST["messages"][-1]["content"], [("ReadFile", {"path": "README.md"})]),
        ("Use the ReadFile tool on `README.md`, then tell me its title", [("ReadFile", {"path": "README.md"})]),
        ("Read README.md and tell me its title.", [("ReadFile", {"path": "README.md"})]),
        ("Read README.md, then tell me what it is about", [("ReadFile", {"path": "README.md"})]),
        ("What is in README.md? Tell me about it", [("ReadFile", {"path": "README.md"})]),
        ("Read a.py and b.py and tell me which is longer", [("ReadFile", {"path": "a.py"}), ("ReadFile", {"path": "b.py"})]),
        ("List the files in this directory and tell me which one to read", [("Glob", {"pattern": "*"})]),
        ("Find where `main` is defined, then tell me the file", [("Grep", {"pattern": "main"})]),
        ("Run `ls -la` and tell me the result", [("Shell", {"command": "ls -la"})]),
        ("Make a todo list for reading README.md", [("ReadFile", {"path": "README.md"})]),
    ],
)  # fmt: skip
def test_kimi_cli_gets_exactly_the_asked_for_calls(prompt: str, expected: list[tuple[str, dict[str, Any]]]) -> None:
    """The issue's case: "Use the ReadFile tool on `README.md`, then tell me its title" got ReadFile and also
    AskUserQuestion (the rest, "tell me its title", matched the question tool), and the answer then quoted the
    question's result. The asked-for calls, and no question, sub-agent or to-do tool beside them."""
    got = calls(prompt, KIMI_CLI)
    assert [(n, {k: a[k] for k in e}) for (n, a), (_, e) in zip(got, expected, strict=False)] == expected, got
    assert len(got) == len(expected) and not {n for n, _ in got} & UNASKED, got


def test_a_question_or_to_do_tool_named_in_the_request_is_still_called() -> None:
    got = [n for n, _ in calls("Read README.md, then get my choice with AskUserQuestion", KIMI_CLI)]
    assert got == ["ReadFile", "AskUserQuestion"], got
    got = [n for n, _ in calls("Read README.md, then get a to-do list with SetTodoList", KIMI_CLI)]
    assert got == ["ReadFile", "SetTodoList"], got


def test_the_rest_of_a_planned_request_still_reaches_a_tool_of_its_own() -> None:
    """What the planner leaves ("... then get the weather in Tokyo") still goes to a tool it knows no role for; only
    question, sub-agent and to-do tools are kept out."""
    got = calls("Read README.md, then get the weather in Tokyo", [*KIMI_CLI, WEATHER])
    assert [n for n, _ in got] == ["ReadFile", "get_weather"] and got[1][1] == {"city": "Tokyo"}, got


def test_opencodes_question_and_todo_tools_stay_out_beside_a_read() -> None:
    got = calls("Read README.md and tell me its title.", OPENCODE)
    assert got == [("read", {"filePath": "README.md"})], got


def test_kimi_clis_numbered_listing_gives_the_title_it_was_asked_for() -> None:
    """kimi-cli's ReadFile returns `cat -n` lines ("     1\t# Title"): the answer names the title, as for opencode's
    "1: # Title"."""
    call = {"id": "functions.ReadFile:0", "type": "function"}
    call["function"] = {"name": "ReadFile", "arguments": '{"path": "README.md"}'}
    listing = [  # kimi-cli's ReadFile result, as it sends it: parts
        {"type": "text", "text": "<system>3 lines read from file starting from line 1.</system>"},
        {"type": "text", "text": "     1\t# Client Tier Project\n     2\t\n     3\tA scratch project.\n"},
    ]
    messages = [
        SYSTEM,
        {"role": "user", "content": KIMI_CLI_REQUEST["messages"][-1]["content"]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": listing},
    ]
    answer = generate(Turn(messages, KIMI_CLI)).split(THINK_END)[-1]
    assert "The title is “Client Tier Project”" in answer, answer
