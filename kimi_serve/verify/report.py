"""Results of a verify run and their stable JSON form (schema: docs/verify.md, ``version`` below)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import FAIL, WARN, Finding
from kimi_serve.core.report import json_meta, rounded, to_json
from kimi_serve.verify.wire import json_safe, printable

REPORT_VERSION = 1
REPORT_KIND = "kimi-serve-verify"


SHOW = 160  # characters of server text a finding quotes


def clip(text: str, limit: int = SHOW) -> str:
    """``text``, cut to ``limit`` characters with its length said."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def problem(code: str, message: str, fix: str) -> Finding:
    """One thing wrong with an answer: a stable ``code``, what is wrong, and what fixes it (a failed verify finding).
    Server text in ``message`` is escaped (:func:`~kimi_serve.verify.wire.printable`): a finding is one safe line."""
    return Finding("verify", code, FAIL, printable(message), printable(fix))


def warning(code: str, message: str, fix: str) -> Finding:
    """A fault that does not break the contract (a client still reads the answer): reported, never failed."""
    return Finding("verify", code, WARN, printable(message), printable(fix))


def verdict(code: str, status: str, message: str, fix: str = "") -> Finding:
    """A check's finding (pass, warn, fail or skip) in verify's own words (no server text to escape)."""
    return Finding("verify", code, status, message, fix)


def finding_json(f: Finding) -> dict[str, str]:
    """A finding in verify's report schema (docs/verify.md): code, message, fix."""
    return {"code": f.code, "message": f.message, "fix": f.fix}


@dataclass(frozen=True)
class ProbeResult:
    probe: str
    mode: str  # "non-stream" or "stream"
    latency_s: float
    findings: tuple[Finding, ...] = ()
    unreachable: bool = False  # failed because the server could not be reached, not because of what it said
    attempts: int = 1  # 2 when the first answer failed only in ways a sampling model can (exchange.MODEL_NOISE)
    warnings: tuple[Finding, ...] = ()  # faults a client survives (e.g. no [DONE] after a clean finish)
    detail: str = ""  # what a passing probe found out (e.g. the lossless check: which field carries reasoning)

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def reason(self) -> str:
        return self.findings[0].message if self.findings else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "mode": self.mode,
            "status": "pass" if self.passed else ("unreachable" if self.unreachable else "fail"),
            "latency_s": round(self.latency_s, 3),
            "attempts": self.attempts,
            "findings": [finding_json(f) for f in self.findings],
            "warnings": [finding_json(f) for f in self.warnings],
            **({"detail": self.detail} if self.detail else {}),
        }


@dataclass(frozen=True)
class Readiness:
    ready: bool
    phase: str  # refused | no-answer | not-http | unreachable | warming | http-NNN | ready | no-health-endpoint
    waited_s: float = field(metadata=json_meta(encode=rounded(3)))
    detail: str = ""
    phases: tuple[str, ...] = ()  # distinct phases seen, in order


@dataclass
class VerifyReport:
    target: str
    suite: str
    readiness: Readiness
    model: str | None = None
    server: dict[str, str | None] = field(default_factory=dict)  # parsers the server reports in /model_info
    error: Finding | None = None  # a failure before the probes (unreachable, not ready, auth, model)
    error_unreachable: bool = False
    probes: list[ProbeResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    key_source: str = "none"  # where the API key came from (target.ApiKey.source); never the key
    warnings: list[Finding] = field(default_factory=list)  # faults that do not break the contract (e.g. a key leak)
    checks: list[Finding] = field(default_factory=list)  # least privilege (verify/privilege.py): pass/warn/fail/skip
    listeners: list[Any] | None = None  # verify.listeners.Listener of the server's process tree; None: not checked
    budget: Any = None  # verify.budget.Budget: the served context and output limits; None: not checked
    thinking_off: dict[str, str] = field(default_factory=dict)  # dialect -> honoured / ignored / unknown
    concurrency: int = 0  # the load probe's concurrent streams (0: not run)
    spec_samples: list[Any] = field(default_factory=list)  # verify.draft.SpecSample of the probes' answers
    acceptance: Any = None  # verify.draft.Acceptance: the draft's acceptance as judged; None: speculative decoding off

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return int(ExitCode.UNREACHABLE if self.error_unreachable else ExitCode.FAILED)
        if any(not p.passed and not p.unreachable for p in self.probes):
            return int(ExitCode.FAILED)
        if any(p.unreachable for p in self.probes):
            return int(ExitCode.UNREACHABLE)
        if any(c.status == FAIL for c in self.checks):
            return int(ExitCode.FAILED)
        return int(ExitCode.OK)

    @property
    def status(self) -> str:
        return {0: "pass", 1: "fail", 3: "unreachable"}[self.exit_code]

    def to_dict(self) -> dict[str, Any]:
        listed = ([self.error] if self.error else []) + [f for p in self.probes for f in p.findings]
        return {
            "kind": REPORT_KIND,
            "version": REPORT_VERSION,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "findings": [finding_json(f) for f in listed],
            "status": self.status,
            "target": self.target,
            "model": self.model,
            "suite": self.suite,
            "elapsed_s": round(self.elapsed_s, 3),
            "key_source": self.key_source,
            "readiness": to_json(self.readiness),
            "server": {
                "tool_call_parser": self.server.get("tool_call_parser"),
                "reasoning_parser": self.server.get("reasoning_parser"),
            }
            if self.server
            else None,
            "error": finding_json(self.error) if self.error else None,
            "probes": [p.to_dict() for p in self.probes],
            "warnings": [finding_json(f) for f in self.warnings],
            "checks": [{"status": c.status, **finding_json(c)} for c in self.checks],
            "listeners": to_json(self.listeners) if self.listeners is not None else None,
            "budget": to_json(self.budget),
            "thinking_off": self.thinking_off or None,
            "concurrency": self.concurrency or None,
            "acceptance": to_json(self.acceptance),
        }

    def to_json(self) -> str:
        return json.dumps(json_safe(self.to_dict()), indent=2)
