"""The one report protocol (core/report.py): one status vocabulary, JSON derived from a result's fields by one
function (the documented keys unchanged: docs/json.md), findings printed one way, and commands that print through
one place instead of branching on --json. Pure: no server, no host."""

from __future__ import annotations

import ast
import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding
from kimi_serve.core.output import envelope
from kimi_serve.core.report import Action, Fact, Grade, action_lines, fact_lines, finding_lines, json_meta, to_json

PKG = Path(__file__).resolve().parent.parent / "kimi_serve"


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Inner:
    n: int
    where: Path


@dataclass
class Sample:
    name: str
    renamed: int = field(default=1, metadata=json_meta(key="documented"))
    hidden: str = field(default="x", metadata=json_meta(omit=True))
    rounded: float = field(default=1.23456, metadata=json_meta(encode=lambda v: round(v, 2)))
    maybe: str | None = field(default=None, metadata=json_meta(omit_none=True))
    nothing: str | None = None
    colour: Colour = Colour.RED
    inner: Inner = field(default_factory=lambda: Inner(2, Path("/a/b")))
    pairs: tuple[tuple[str, int], ...] = (("a", 1),)
    table: dict[str, Inner] = field(default_factory=lambda: {"k": Inner(3, Path("c"))})
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("twice",)

    @property
    def twice(self) -> int:
        return 2 * self.renamed


def test_to_json_derives_keys_values_and_nesting_from_the_fields():
    assert to_json(Sample("s")) == {
        "name": "s",
        "documented": 1,
        "rounded": 1.23,
        "nothing": None,
        "colour": "red",
        "inner": {"n": 2, "where": "/a/b"},
        "pairs": [["a", 1]],
        "table": {"k": {"n": 3, "where": "c"}},
        "twice": 2,
    }
    assert list(to_json(Sample("s"))) == [*(k for k in to_json(Sample("s")) if k != "twice"), "twice"]
    assert to_json(Sample("s", maybe="here"))["maybe"] == "here"
    assert to_json(Fact("free_bytes", 7)) == {"name": "free_bytes", "value": 7}
    with pytest.raises(TypeError, match="no JSON form for object"):
        to_json({"x": object()})


def test_one_status_vocabulary_in_both_documented_spellings():
    for grade, verb in [(PASS, "done"), (WARN, "warning"), (FAIL, "failed"), (SKIP, "skipped")]:
        assert Grade.of(grade.value) is Grade.of(verb) is grade and grade.action_word == verb
    assert Grade.of("planned") is Grade.PLANNED and Grade.PLANNED.action_word == "planned"
    with pytest.raises(ValueError, match="not a status: 'done!'"):
        Grade.of("done!")
    # a finding's status is still the documented word, in JSON and in comparisons
    f = Finding("rules", "x", FAIL, "m")
    assert json.dumps(to_json(f)["status"]) == '"fail"' and f.status == "fail"


def test_an_action_keeps_its_verb_and_refuses_a_word_outside_the_vocabulary():
    assert to_json(Action("write unit", FAIL, "disk full")) == {
        "action": "write unit",
        "status": "failed",
        "detail": "disk full",
    }
    assert Action("start", "done").status == "done" and Action("start", "done").outcome is PASS
    with pytest.raises(ValueError):
        Action("start", "finished")


def test_the_migrated_results_keep_their_documented_json():
    """Each result whose hand-written to_json went away: the derived JSON is the documented one, key for key."""
    from kimi_serve.clients.endpoint import Endpoint
    from kimi_serve.host.allreduce_selftest import SelftestPlan
    from kimi_serve.router.client import RouterHealth, Worker
    from kimi_serve.service.install import InstallOutcome, Result
    from kimi_serve.service.secret import KeyFileResult
    from kimi_serve.verify.listeners import Listener

    f = Finding("rules", "parsers.tool_call", FAIL, "bad", "fix it", "x.yaml:3: parsers.tool_call")
    assert to_json(f) == {
        "layer": "rules",
        "code": "parsers.tool_call",
        "status": "fail",
        "message": "bad",
        "fix": "fix it",
        "where": "x.yaml:3: parsers.tool_call",
    }
    out = InstallOutcome("prod", "ab" * 32, started=True, verify_exit=0, detail="passed")
    assert to_json(out) == {
        "profile": "prod",
        "unit_sha256": "ab" * 32,
        "started": True,
        "verify_exit_code": 0,
        "ok": True,
        "detail": "passed",
    }
    res = Result("sglang-kimi.service", new=out)
    res.add("write unit", "done", "/etc/x")
    doc = envelope("install-service", res.exit_code, to_json(res))
    assert doc["unit"] == "sglang-kimi.service" and doc["rollback"] is None and doc["new"]["ok"] is True
    assert doc["steps"] == [{"action": "write unit", "status": "done", "detail": "/etc/x"}]
    assert to_json(KeyFileResult(Path("/etc/k"), True, "new", "none")) == {
        "key_file": "/etc/k",
        "changed": True,
        "api_key": "new",
        "admin_api_key": "none",
    }
    assert to_json(Listener("127.0.0.1", 30000, 42, "python3")) == {
        "address": "127.0.0.1",
        "port": 30000,
        "pid": 42,
        "command": "python3",
        "protocol": "tcp",
        "loopback": True,
    }
    plan = SelftestPlan(2, ("nccl",), (("decode bs1 (1x7168)", 1, 7168),))
    assert to_json(plan) == {
        "paths": ["nccl"],
        "sizes": [["decode bs1 (1x7168)", 1, 7168]],
        "atol": 0.0,
        "backend": "nccl",
    }
    health = RouterHealth(True, True, 1, 2, (Worker("http://127.0.0.1:30001", True),), "", True)
    assert to_json(health) == {
        "reachable": True,
        "ready": True,
        "healthy_workers": 1,
        "total_workers": 2,
        "detail": "",
        "listed": True,
        "workers": [{"url": "http://127.0.0.1:30001", "healthy": True}],
    }
    ep = Endpoint("http://h:1/v1", "kimi", "KEY", True, 8, 4, None, None, "prod", ("model",), ("note",))
    assert to_json(ep) == {
        "profile": "prod",
        "base_url": "http://h:1/v1",
        "model": "kimi",
        "api_key_required": True,
        "context_length": 8,
        "max_output_tokens": 4,
        "reasoning_field": None,
        "moonshot_thinking_honoured": None,
        "assumed": ["model"],
        "family": "kimi-k2.5",
        "sampling": {},
        "instant_mode": True,
        "preserve_thinking": None,
    }


def test_findings_and_actions_print_one_way():
    ok = Finding("rules", "parsers", PASS, "parsers set")
    bad = Finding("host", "model", FAIL, "no model", "download it", "p.yaml:2: model.path")
    warn = Finding("doctor", "disk", WARN, "3 GiB free", "free space")
    # check (and install-service --dry-run's failing checks, indented)
    assert finding_lines([ok, bad]) == [
        "ok   [rules] parsers set",
        "FAIL [host] p.yaml:2: model.path: no model (fix: download it)",
    ]
    assert finding_lines([bad], indent="  ")[0].startswith("  FAIL [host] p.yaml:2")
    # verify's least-privilege checks
    assert finding_lines([warn], word="upper", label="code") == ["WARN disk: 3 GiB free (fix: free space)"]
    # doctor: a code column, the fix on a line of its own
    assert finding_lines([ok, warn], word="upper", label="code", width=18, sep="  ", fix_below=True) == [
        f"PASS  {'parsers':<18} parsers set",
        f"WARN  {'disk':<18} 3 GiB free",
        f"      {'':<18} fix: free space",
    ]
    steps = [Action("write unit", "done", "/etc/x"), Action("start", Grade.PLANNED)]
    assert action_lines(steps) == ["ok   write unit: /etc/x", "plan start"]
    # status's rows: a fact, or any (name, value) pair
    assert fact_lines([Fact("health", "ok"), ("last start", "none recorded")]) == [
        "health:       ok",
        "last start:   none recorded",
    ]


def _json_ifs(path: Path) -> list[int]:
    """Lines of ``if`` statements whose test reads a ``json``/``as_json`` name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If):
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            if names & {"as_json", "json"}:
                found.append(node.lineno)
    return found


def test_no_command_branches_on_json():
    """Commands return their result to commands/options.py's emit, the one place text or JSON is chosen."""
    branching = {
        p.name: lines
        for p in sorted((PKG / "commands").glob("*.py"))
        if (lines := _json_ifs(p)) and p.name != "options.py"
    }
    assert branching == {}, f"print through commands/options.py emit instead: {branching}"
    assert _json_ifs(PKG / "commands" / "options.py"), "emit holds the one branch"


# The results whose JSON is still written by hand (their shape is not the fields'): none may be added.
HAND_WRITTEN: set[str] = {
    "profile/member.py:Member",
    "service/foreground.py:ForegroundStatus",
    "service/fleet_status.py:FleetStatus",
    "service/status.py:Status",
    "service/fleet.py:Fleet",
    "clients/configs.py:ClientConfig",
    "verify/members.py:DeploymentReport",
    "verify/report.py:VerifyReport",
    "profile/deployment.py:Deployment",
    "core/runs.py:Run",
}


def test_json_is_derived_not_hand_written():
    written: set[str] = set()
    for path in PKG.rglob("*.py"):
        source = path.read_text()
        if "def to_json" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(m, ast.FunctionDef) and m.name == "to_json" for m in node.body
            ):
                written.add(f"{path.relative_to(PKG).as_posix()}:{node.name}")
    added = written - HAND_WRITTEN
    assert not added, f"derive the JSON with core/report.py to_json (json_meta on the fields) instead: {sorted(added)}"
