"""The post-start API contract check (`kimi-serve verify`): structured tool_calls and reasoning_content, or a
diagnosis that says what to fix. Core API for the `up` command, systemd ExecStartPost and `check --contract`."""

from __future__ import annotations

from kimi_serve.verify.options import VerifyOptions
from kimi_serve.verify.readiness import wait_ready
from kimi_serve.verify.report import VerifyReport
from kimi_serve.verify.runner import AFTER_START_WAIT, run_verify
from kimi_serve.verify.target import ApiKey, parse_target, resolve_key

__all__ = [
    "AFTER_START_WAIT",
    "ApiKey",
    "VerifyOptions",
    "VerifyReport",
    "parse_target",
    "resolve_key",
    "run_verify",
    "wait_ready",
]
