"""The SM120 platform facts: what SGLang 0.5.23's platform probes report on an RTX PRO 6000 Blackwell (compute
capability 12.0). The one home for them: SGLang's parser tier (:mod:`kimi_serve.sglang.probe`) and the simulator
resolve the launch under these facts (``sglang.srt.runtime_context.override_platform``), and doctor expects the
capability. Standard library only: this module is imported inside the SGLang interpreter.
"""

from __future__ import annotations

from typing import Any

DEVICE_CAPABILITY = (12, 0)
EXPECTED_CC = "12.0"  # as nvidia-smi prints compute_cap

SM120_FACTS: dict[str, Any] = {
    "is_cuda": True,
    "is_hip": False,
    "is_sm120": True,
    "is_blackwell": True,
    "is_sm100": False,
    "is_sm90": False,
    "is_sm100_or_sm110": False,
    "is_sm110": False,
    "has_flashinfer": True,
    "device_sm": 120,
    "device_capability": DEVICE_CAPABILITY,
    "is_hopper_with_cuda_12_3": False,
}
