"""What `bench` sends: the offline dataset file for ``sglang.bench_serving`` and the flags that go with it.

- ``agentic`` (default): Kimi-shaped coding-agent requests built from ``data/agentic.json`` (shipped): a long system
  prompt, seven tool definitions, thinking on (``chat_template_kwargs.thinking``), and three kinds of turn mixed
  deterministically: a tool-call turn (the model reasons, then calls a tool), a turn after a tool result (a file or a
  test log of 1-5k tokens in the history; the model reasons, then answers) and a long reasoning answer (tools offered,
  ``tool_choice: none``). Some requests carry 1-2 earlier tool exchanges in their history. Lengths: prompts ~1-7k
  tokens, answers up to 2.5k characters; ``max_tokens`` 1024-2048; ``ignore_eos`` off, so the model stops by itself.
  Written as bench_serving's ``openai`` dataset (one JSON request per line).
- ``random``: bench_serving's offline ``random-ids`` dataset, fixed lengths (``--random-range-ratio 1.0``): 1024 prompt
  tokens, 256 output tokens (``ignore_eos`` on, as bench_serving sends it).
- ``FILE``: a JSONL file in bench_serving's ``openai`` dataset form, used as it is; or `capture`'s prompts file
  (ids, ShareGPT rows, a top-level ``thinking``), written in that form into the results folder first.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.files import write_atomic
from kimi_serve.core.inputs import InputBoundError, load_json, read_regular, too_large

DATA = Path(__file__).resolve().parent / "data" / "agentic.json"
RANDOM_INPUT_LEN = 1024
MAX_WORKLOAD_BYTES = 256 * 1024 * 1024  # a FILE workload (1,000 agentic requests are about 60 MB)
RANDOM_OUTPUT_LEN = 256


@dataclass(frozen=True)
class Workload:
    name: str  # agentic | random | the file's name
    args: tuple[str, ...]  # bench_serving flags selecting the dataset
    digest: str  # identifies the requests (resume refuses to mix workloads)
    path: Path | None = None


def _call(name: str, args: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "id": f"functions.{name}:{index}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def agentic_requests(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` requests, the same for the same (count, seed)."""
    spec = json.loads(DATA.read_text(encoding="utf-8"))
    rng = random.Random(seed)
    tasks, results, caps = spec["tasks"], spec["tool_results"], spec["max_tokens"]
    out: list[dict[str, Any]] = []
    for i in range(count):
        kind = ("tool", "after_tool", "tool", "answer")[i % 4]
        messages: list[dict[str, Any]] = [{"role": "system", "content": spec["system"]}]
        calls = 0
        for _ in range(rng.choice((0, 0, 1, 2))):  # earlier exchanges of the same session
            name, args, text = results[rng.randrange(len(results))]
            messages += [
                {"role": "user", "content": rng.choice(tasks)[1]},
                {"role": "assistant", "content": "", "tool_calls": [_call(name, args, calls)]},
                {"role": "tool", "tool_call_id": f"functions.{name}:{calls}", "content": text[:4000]},
            ]
            calls += 1
        body: dict[str, Any] = {"tools": spec["tools"]}
        if kind == "after_tool":
            name, args, text = results[i % len(results)]
            ask = next(t for k, t in tasks if k == "tool")
            messages += [
                {"role": "user", "content": f"{ask} Then explain it, at least {rng.randrange(400, 1600)} characters."},
                {"role": "assistant", "content": "", "tool_calls": [_call(name, args, calls)]},
                {"role": "tool", "tool_call_id": f"functions.{name}:{calls}", "content": text},
            ]
        else:
            pool = [t for k, t in tasks if k == kind]
            messages.append({"role": "user", "content": pool[rng.randrange(len(pool))]})
            if kind == "answer":
                body["tool_choice"] = "none"
        out.append(
            {
                "messages": messages,
                **body,
                "max_tokens": caps[kind],
                "temperature": 1.0,
                "top_p": 0.95,
                "chat_template_kwargs": {"thinking": True},
                "ignore_eos": False,
            }
        )
    return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _capture_prompts(data: bytes, path: Path, out_dir: Path) -> Path | None:
    """A `capture` prompts file (ids, ShareGPT rows, the thinking switch at the top) as bench_serving's ``openai``
    rows in ``out_dir`` (the same requests capture sends); None when the file is not one (it is used as it is)."""
    from kimi_serve.capture.prompts import PromptError, as_openai_rows, parse_prompts

    try:
        prompts = parse_prompts(data.decode("utf-8"), str(path))
    except (PromptError, UnicodeDecodeError):
        return None
    target = out_dir / f"workload-{path.stem}.jsonl"
    write_atomic(target, as_openai_rows(prompts))
    return target


def prepare(workload: str, requests: int, out_dir: Path) -> Workload:
    """The dataset for ``workload`` (written into ``out_dir`` for agentic) and its bench_serving flags."""
    if workload == "agentic":
        path = out_dir / "workload-agentic.jsonl"
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in agentic_requests(requests))
        write_atomic(path, text)
        return Workload(
            "agentic", ("--dataset-name", "openai", "--dataset-path", str(path)), _digest(text.encode()), path
        )
    if workload == "random":
        args = (
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            str(RANDOM_INPUT_LEN),
            "--random-output-len",
            str(RANDOM_OUTPUT_LEN),
            "--random-range-ratio",
            "1.0",
        )
        return Workload("random", args, _digest(" ".join(args).encode()))
    path = Path(workload)
    if not path.is_file():
        raise KimiServeError(
            f"workload {workload!r} is neither agentic, random nor a readable file",
            where="--workload",
            hint="use agentic, random or a JSONL file of chat requests",
            exit_code=ExitCode.USAGE,
        )
    try:
        data = read_regular(path, MAX_WORKLOAD_BYTES)[1]
        if len(data) > MAX_WORKLOAD_BYTES:
            raise too_large(MAX_WORKLOAD_BYTES)
        converted = _capture_prompts(data, path, out_dir)
        if converted is not None:
            return Workload(
                path.name, ("--dataset-name", "openai", "--dataset-path", str(converted)), _digest(data), converted
            )
        lines = [line for line in data.decode().splitlines() if line.strip()]
        for number, line in enumerate(lines, 1):  # every request within the depth bound (bench_serving loads each)
            try:
                load_json(line)
            except InputBoundError as exc:
                raise InputBoundError(f"line {number} is {exc}", exc.hint) from None
        first = load_json(lines[0])
        if not isinstance(first, dict) or not first.get("messages"):
            raise ValueError("no messages")
    except InputBoundError as exc:
        raise KimiServeError(f"{path}: {exc}", where="--workload", hint=exc.hint, exit_code=ExitCode.USAGE) from None
    except OSError as exc:
        raise KimiServeError(
            f"cannot read {path} ({exc.strerror or exc})",
            where="--workload",
            hint="pass a readable JSONL file",
            exit_code=ExitCode.USAGE,
        ) from None
    except (ValueError, IndexError, UnicodeDecodeError):
        raise KimiServeError(
            f"{path} is not a JSONL file of chat requests (a JSON object with `messages` per line)",
            where="--workload",
            hint="see docs/bench.md, Workloads",
            exit_code=ExitCode.USAGE,
        ) from None
    return Workload(path.name, ("--dataset-name", "openai", "--dataset-path", str(path.resolve())), _digest(data), path)
