"""How one verify run goes, as one frozen object: built once by whoever starts the run (the `verify` command, `up`, the
contract dry run, bench, a monitoring run) and passed down whole, to every server of a deployment alike."""

from __future__ import annotations

from dataclasses import dataclass

from kimi_serve.core.http_body import LIMITS, Limits
from kimi_serve.core.suites import QUICK
from kimi_serve.verify.draft import DEFAULT_FLOOR
from kimi_serve.verify.readiness import Progress

DEFAULT_TIMEOUT = 180.0


@dataclass(frozen=True)
class VerifyOptions:
    """``api_key`` and ``key_source``: the key sent and where it came from, for the report
    (:attr:`kimi_serve.verify.target.ApiKey.source`; None: "caller" when a key is given, else "none"). ``model``: None
    is the first one /v1/models lists. ``wait``: seconds to wait for readiness (0: check once). ``timeout``: the limit
    for everything after readiness. ``suite``: core/suites.py. ``progress`` receives readiness phases. ``max_tokens``
    caps every probe's max_tokens (monitoring keeps runs light). ``expected_ports``: listeners beyond loopback besides
    the API port that are fine. ``limits``: what the run reads at most (core/http_body.py). ``concurrency``: the load
    probe's N concurrent streams (None: 8 in ``full``, none in the other suites; 0 leaves it out). ``accept_floor``:
    the speculative draft's expected mean accept length (below it: a WARN; None: no floor); ``spec_expected``:
    whether the caller's profile runs speculative decoding (the server's word comes first; verify/draft.py).
    ``family``: the profile's model.family (None: the one the served model's name spells, verify/family_probe.py);
    ``preserve_thinking``: the profile's model.preserve_thinking (None: the server's default)."""

    api_key: str | None = None
    key_source: str | None = None
    model: str | None = None
    wait: float = 0.0
    timeout: float = DEFAULT_TIMEOUT
    suite: str = QUICK
    progress: Progress | None = None
    max_tokens: int | None = None
    expected_ports: tuple[int, ...] = ()
    limits: Limits = LIMITS
    concurrency: int | None = None
    accept_floor: float | None = DEFAULT_FLOOR
    spec_expected: bool | None = None
    family: str | None = None
    preserve_thinking: bool | None = None
