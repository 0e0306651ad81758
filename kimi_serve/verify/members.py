"""Verify a replicated deployment: the contract through the router, then on each replica, one report per part, so
the output names the replica that breaks it (docs/verify.md, "Replicated profiles").

Which members there are and where they listen comes from the caller (`verify --profile P`: the deployment's members,
each with its URL); this module only runs :func:`kimi_serve.verify.runner.run_verify` on each and combines the
verdicts. A member is anything with a ``label`` (kimi_serve.profile.member.Member: verify imports only core).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from kimi_serve.core.errors import ExitCode
from kimi_serve.verify.options import VerifyOptions
from kimi_serve.verify.report import VerifyReport
from kimi_serve.verify.runner import run_verify
from kimi_serve.verify.wire import json_safe, printable


class Labelled(Protocol):
    """A deployment's member as verify sees it: its label (``router``, ``replica 0``)."""

    @property
    def label(self) -> str: ...


M = TypeVar("M", bound=Labelled)


@dataclass(frozen=True)
class MemberReport:
    member: Labelled
    report: VerifyReport

    @property
    def title(self) -> str:
        """``replica 0 (http://127.0.0.1:30010)``: the member's label and the target verified."""
        return f"{self.member.label} ({self.report.target})"

    def first_problem(self) -> str:
        r = self.report
        if r.error is not None:
            return r.error.line()
        bad = next((p for p in r.probes if not p.passed), None)
        if bad is not None:
            return f"{bad.probe} {bad.mode}: {bad.findings[0].line()}"
        check = next((c for c in r.checks if c.status == "fail"), None)
        return check.line() if check else r.status


@dataclass
class DeploymentReport:
    parts: list[MemberReport]  # the router first, then each replica in the router's order
    router_view: dict[str, Any] | None = field(default=None)  # the router's own health view, when the caller has it

    @property
    def exit_code(self) -> int:
        """1 when any part violates the contract, else 3 when any part is unreachable, else 0."""
        codes = {p.report.exit_code for p in self.parts}
        if ExitCode.FAILED in codes:
            return int(ExitCode.FAILED)
        return int(ExitCode.UNREACHABLE) if ExitCode.UNREACHABLE in codes else int(ExitCode.OK)

    @property
    def broken(self) -> list[MemberReport]:
        return [p for p in self.parts if p.report.exit_code != 0]

    def summary(self) -> str:
        if not self.broken:
            return f"verify: deployment holds the contract: {', '.join(p.title for p in self.parts)}"
        return (
            "verify: deployment "
            + ("VIOLATED" if self.exit_code == ExitCode.FAILED else "unreachable in part")
            + ": "
            + "; ".join(f"{p.title} {p.report.status}: {p.first_problem()}" for p in self.broken)
        )

    def to_dict(self) -> dict[str, Any]:
        """The router's report at the top level (the schema of a single verify, docs/verify.md), with ``ok``,
        ``exit_code``, ``status`` and ``findings`` for the whole deployment, and ``replicas``: one entry per replica
        with its own full report."""
        router, *reps = self.parts
        top = router.report.to_dict()
        findings = [
            {**f, "message": f"{p.member.label}: {f['message']}"}
            for p in self.parts
            for f in p.report.to_dict()["findings"]
        ]
        top.update(
            {
                "ok": self.exit_code == 0,
                "exit_code": self.exit_code,
                "status": {0: "pass", 1: "fail", 3: "unreachable"}[self.exit_code],
                "findings": findings,
                "router": {
                    "name": router.member.label,
                    "status": router.report.status,
                    "exit_code": router.report.exit_code,
                    "health": self.router_view,
                },
                "replicas": [
                    {
                        "name": p.member.label,
                        "target": p.report.target,
                        "status": p.report.status,
                        "exit_code": p.report.exit_code,
                        "problem": None if p.report.exit_code == 0 else p.first_problem(),
                        "report": p.report.to_dict(),
                    }
                    for p in reps
                ],
            }
        )
        return top

    def to_json(self) -> str:
        return json.dumps(json_safe(self.to_dict()), indent=2)


def verify_deployment(
    urls: Mapping[M, str],
    options: VerifyOptions,
    *,
    routed: bool,
    router_view: Callable[[str], dict[str, Any]],
) -> VerifyReport | DeploymentReport:
    """`verify --profile`: ``urls``, each member's URL, the router first. Not ``routed``: the one server's own report;
    else each member in turn (the router, then each replica), each checked with the same ``options`` (key, model,
    wait, timeout, suite...), and the router's health view (``router_view(URL)``)."""
    first = next(iter(urls.values()))
    if not routed:
        return run_verify(first, options)
    report = DeploymentReport([MemberReport(m, run_verify(url, options)) for m, url in urls.items()])
    report.router_view = router_view(first)
    return report


def render_deployment(report: DeploymentReport, render_one: Any) -> str:
    """Each part's own report (``render_one``: render_lines or render_table), headed by its name, then the verdict
    of the whole deployment; the router's health view when there is one."""
    out = []
    for p in report.parts:
        out += [f"== {p.title}", render_one(p.report), ""]
    view = report.router_view
    if view is not None:
        sick = [w["url"] for w in view.get("workers", []) if not w.get("healthy")]
        out.append(
            printable(
                f"router health: {view.get('healthy_workers')}/{view.get('total_workers')} workers healthy"
                + (f" (unhealthy: {', '.join(map(str, sick))})" if sick else "")
                if view.get("reachable")
                else f"router health: unreachable: {view.get('detail') or 'no detail given'}"
            )
        )
    out.append(report.summary())
    return "\n".join(out)
