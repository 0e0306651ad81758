"""Number options: every float a command takes is a finite number within stated bounds, so `nan`, `inf`, `-inf` or
`1e400` (which overflows to inf) is a usage error, exit 2 and one line naming the option (docs/exit-codes.md), never
a wait without end or a crash later on. tests/test_cli_finite_numbers.py walks every command's options to hold it."""

from __future__ import annotations

import math
from typing import Any

import typer

# the longest wait or timeout any command takes: a day (inf, 1e300 or NaN would be no deadline at all)
MAX_SECONDS = 86_400.0


def finite(value: float | None) -> float | None:
    """The option's callback: a non-finite number is refused even where a bound would let it through."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def number_option(default: Any, *names: str, lo: float, hi: float, help: str) -> Any:
    """A float option bounded on both sides, finite: ``lo``..``hi`` (the fix of its usage error names them)."""
    return typer.Option(default, *names, min=lo, max=hi, callback=finite, help=help)


def seconds_option(default: Any, *names: str, help: str, lo: float = 0.0, hi: float = MAX_SECONDS) -> Any:
    """A duration in seconds: ``lo``..``hi``, a day at most unless said otherwise."""
    return number_option(default, *names, lo=lo, hi=hi, help=help)
