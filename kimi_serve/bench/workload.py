"""What `bench` sends (docs/bench.md, Workloads): the offline dataset file for ``sglang.bench_serving`` and its flags.

- ``agentic`` (default): Kimi-shaped coding-agent requests from ``data/agentic.json`` (tool-call turns, turns after a
  tool result, long reasoning answers; thinking on, ``ignore_eos`` off), written as bench_serving's ``openai`` dataset.
- ``random``: bench_serving's offline ``random-ids`` dataset, 1024 prompt and 256 output tokens.
- ``FILE``: a JSONL file in the ``openai`` dataset form as it is, or `capture`'s prompts file converted to it.
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
from kimi_serve.core.inputs import InputBoundError, load_json, read_text

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


def _openai(name: str, path: Path, text: str) -> Workload:
    """A workload of bench_serving's ``openai`` dataset at ``path``, identified by the digest of ``text``."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Workload(name, ("--dataset-name", "openai", "--dataset-path", str(path)), digest, path)


def _capture_prompts(text: str, path: Path, out_dir: Path) -> Path | None:
    """A `capture` prompts file (ids, ShareGPT rows, the thinking switch at the top) as bench_serving's ``openai``
    rows in ``out_dir`` (the same requests capture sends); None when the file is not one (it is used as it is)."""
    from kimi_serve.capture.prompts import PromptError, as_openai_rows, parse_prompts

    try:
        prompts = parse_prompts(text, str(path))
    except PromptError:
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
        return _openai("agentic", path, text)
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
        return Workload("random", args, hashlib.sha256(" ".join(args).encode()).hexdigest()[:16])
    path = Path(workload)
    if not path.is_file():
        raise KimiServeError(
            f"workload {workload!r} is neither agentic, random nor a readable file",
            where="--workload",
            hint="use agentic, random or a JSONL file of chat requests",
            exit_code=ExitCode.USAGE,
        )
    try:
        text = read_text(path, MAX_WORKLOAD_BYTES)
        converted = _capture_prompts(text, path, out_dir)
        if converted is not None:
            return _openai(path.name, converted, text)
        lines = [line for line in text.splitlines() if line.strip()]
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
    return _openai(path.name, path.resolve(), text)
