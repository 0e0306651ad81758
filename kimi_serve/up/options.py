"""What `up` runs under: its deadlines and settings (from the profile), and how it names the server."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from kimi_serve.process.startup import FAILURE_GRACE_S, INIT_TIMEOUT_S
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.schema import default_of

# After SIGTERM, SGLang drains and exits 0; during load it has no handler and dies by SIGTERM: both are clean stops.
CLEAN_STOP = (0, -signal.SIGTERM)
HEALTH_TIMEOUT_S = 20.0  # SGLang's SGLANG_HEALTH_CHECK_TIMEOUT: /health generates a token and may take this long


@dataclass(frozen=True)
class UpOptions:
    verify: bool = True
    startup_timeout_s: float = float(default_of("startup.timeout"))
    init_timeout_s: float = INIT_TIMEOUT_S  # all ranks past "Init parallel ends." (kimi_serve/process/startup.py)
    stop_grace_s: float = float(default_of("service.stop_timeout"))  # SIGTERM -> SIGKILL of the group
    failure_grace_s: float = FAILURE_GRACE_S  # after a failure in the log, time for the server to exit on its own
    health_every_s: float = 1.0
    tp_size: int = 1
    verify_suite: str = str(default_of("verify.suite"))
    verify_timeout_s: float = float(default_of("verify.timeout"))
    served_model: str | None = None
    accept_floor: float | None = default_of("speculative.accept_floor")  # the draft's expected accept length
    speculative: bool = False  # the profile runs speculative decoding (verify judges the draft)
    family: str | None = None  # model.family: the family's probes (verify/family_probe.py)
    preserve_thinking: bool | None = None  # model.preserve_thinking (None: the server's default)

    @classmethod
    def from_profile(cls, p: Profile, *, verify: bool = True, **overrides: Any) -> UpOptions:
        values = dict(
            verify=verify,
            startup_timeout_s=float(p.startup.timeout),
            stop_grace_s=float(p.service.stop_timeout),
            tp_size=p.parallel.tp_size,
            verify_suite=p.verify.suite,
            verify_timeout_s=float(p.verify.timeout),
            served_model=p.model.served_name,
            accept_floor=p.speculative.accept_floor,
            speculative=p.speculative.enabled,
            family=p.model.family,
            preserve_thinking=p.model.preserve_thinking,
        )
        return cls(**{**values, **overrides})
