#!/usr/bin/env python3
"""What constrained generation costs the simulator (SGLang's own xgrammar backend with the stand-in tokenizer).

Prints, in the SGLang interpreter, with the simulator's own classes and `prod`-like flags:
- backend: building SGLang's grammar backend once (xgrammar's TokenizerInfo over 163840 ids), done at startup;
- compile: each grammar the first time (json_object, a JSON schema, a regex, the kimi_k2 forced-call structural tag);
- request: the extra CPU work per constrained request once compiled (cache hit + the masked decode of the answer),
  against encoding the same answer unconstrained. The decode runs in a worker thread, off the event loop.
Numbers, not targets: the machine is often shared; report the load with them.

Run: PYTHONPATH=. $KIMI_SERVE_SGLANG_PYTHON benchmarks/bench_simulator_constrain.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

FLAGS = [
    "--model-path",
    "/models/Kimi-K2.5",
    "--served-model-name",
    "kimi-k2.5",
    "--trust-remote-code",
    "--tp-size",
    "8",
    "--tool-call-parser",
    "kimi_k2",
    "--reasoning-parser",
    "kimi_k2",
]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "population": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
    },
    "required": ["name", "population", "tags"],
    "additionalProperties": False,
}
TAG = {
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [
            {"type": "const_string", "value": "<|tool_calls_section_begin|>"},
            {
                "type": "tag",
                "begin": "<|tool_call_begin|>functions.get_weather:",
                "content": {
                    "type": "sequence",
                    "elements": [
                        {"type": "regex", "pattern": "\\d+"},
                        {"type": "const_string", "value": "<|tool_call_argument_begin|>"},
                        {"type": "json_schema", "json_schema": {"type": "object"}, "style": "json"},
                    ],
                },
                "end": "<|tool_call_end|>",
            },
            {"type": "const_string", "value": "<|tool_calls_section_end|>"},
        ],
    },
}
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "json_object": ({"json_schema": json.dumps({"type": "object"})}, '{"answer": "Paris is the capital of France."}'),
    "json_schema": (
        {"json_schema": json.dumps(SCHEMA)},
        '{"name": "Paris", "population": 2100000, "tags": ["a", "b"]}',
    ),
    "regex": ({"regex": "[0-9]{3}"}, "Three digits: 123"),
    "structural_tag": (
        {"structural_tag": json.dumps(TAG)},
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs

    from sglang.srt.arg_groups.overrides import model_config_of
    from sglang.srt.sampling.sampling_params import SamplingParams

    from kimi_serve.simulator.args import resolve
    from kimi_serve.simulator.constrain import Constrainer
    from kimi_serve.simulator.tokenizer import build_standin

    sim = resolve(FLAGS)
    tokenizer = build_standin()
    constrainer = Constrainer(model_config_of(sim.server_args), tokenizer, sim.server_args)
    t0 = time.perf_counter()
    constrainer.prepare()
    print(f"backend (TokenizerInfo, once at startup): {time.perf_counter() - t0:.3f} s")
    for name, (constraint, answer) in CASES.items():
        params = SamplingParams(max_new_tokens=512, **constraint)
        params.normalize(tokenizer)
        t0 = time.perf_counter()
        grammar, abort = constrainer.grammar(params, [1, 2, 3], False)
        compile_s = time.perf_counter() - t0
        assert abort is None, abort
        intended = tokenizer.encode(answer, add_special_tokens=False)
        ids, _ = constrainer.decode(grammar, intended, 512)
        samples, plain = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            grammar, _ = constrainer.grammar(params, [1, 2, 3], False)
            constrainer.decode(grammar, intended, 512)
            samples.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            tokenizer.encode(answer, add_special_tokens=False)
            plain.append(time.perf_counter() - t0)
        per = statistics.median(samples)
        print(
            f"{name:15s} compile {compile_s * 1000:7.2f} ms   request {per * 1000:7.2f} ms"
            f" ({len(ids)} tokens, {per / max(1, len(ids)) * 1e6:6.0f} us/token)"
            f"   unconstrained encode {statistics.median(plain) * 1000:5.2f} ms   -> {tokenizer.decode(ids)!r}"
        )


if __name__ == "__main__":
    main()
