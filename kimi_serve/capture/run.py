"""`capture`'s run: each selected prompt through the server's chat endpoint with the id options, at most
``concurrency`` at once (one daemon thread each), each result written by the main thread as it arrives (records.jsonl
or rejects.jsonl, store.py), progress on a terminal, the books (record.py's :class:`Books`) at the end.

Every request is non-streamed, with ``return_input_ids_in_sglext``, ``return_output_ids_in_sglext`` and
``return_spec_tokens_details``; the output ids are then decoded by the server's own ``/v1/detokenize`` with
``skip_special_tokens: false`` for the lossless check. A failed request is a reject with its cause and the run goes
on; when the server stops answering altogether (``UNREACHABLE_STREAK`` prompts in a row find no server), the run
stops: the same command resumes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import Any

from kimi_serve.capture import record as rec
from kimi_serve.capture import store
from kimi_serve.capture.prompts import Prompt, PromptError, read_prompts
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.http import TransportError, request
from kimi_serve.core.http_body import Limits
from kimi_serve.core.inputs import InputBoundError
from kimi_serve.core.lock import directory_lock
from kimi_serve.verify import http_findings as hx
from kimi_serve.verify.target import Target

# one answer and its decoded text, each request a budget of its own (a capture runs for hours: no run-wide total)
LIMITS = Limits(document_bytes=64 * 1024 * 1024, total_bytes=64 * 1024 * 1024)
UNREACHABLE_STREAK = 8
ID_OPTIONS = {
    "stream": False,
    "return_input_ids_in_sglext": True,
    "return_output_ids_in_sglext": True,
    "return_spec_tokens_details": True,
}


@dataclass(frozen=True)
class CaptureOptions:
    target: Target
    api_key: str | None
    prompts: Path
    out: Path
    concurrency: int = 4
    limit: int | None = None
    model: str | None = None
    profile: str | None = None
    timeout: float = 600.0  # seconds for one prompt's answer


def load(path: Path) -> list[Prompt]:
    """The prompts file, or exit 2 naming the file and line (exit 2 too when it cannot be read: it is the input)."""
    try:
        return read_prompts(path)
    except PromptError as exc:
        raise KimiServeError(str(exc), where="--prompts", hint=exc.hint, exit_code=ExitCode.USAGE) from None
    except InputBoundError as exc:
        raise KimiServeError(f"{path}: {exc}", where="--prompts", hint=exc.hint, exit_code=ExitCode.USAGE) from None
    except OSError as exc:
        raise KimiServeError(
            f"cannot read {path} ({exc.strerror or exc})",
            where="--prompts",
            hint="pass a readable JSONL file of chat requests (docs/capture.md)",
            exit_code=ExitCode.USAGE,
        ) from None


def _post(opts: CaptureOptions, prompt: Prompt, path: str, body: dict[str, Any]) -> Any:
    """The JSON answer to one POST, or the Reject that says why there is none."""
    deadline = time.monotonic() + opts.timeout
    try:
        reply = request(
            "POST", opts.target.url(path), deadline=deadline, api_key=opts.api_key, json_body=body, limits=LIMITS
        )
    except TransportError as err:
        finding = hx.transport_finding(err, timeout=opts.timeout)
        return rec.Reject(
            prompt.id, "unreachable" if hx.unreachable(err) else finding.code, f"{path}: {finding.message}"
        )
    failure = hx.http_finding(reply, api_key_sent=bool(opts.api_key), model=body.get("model"))
    if failure is None:
        data, failure = hx.parse_json_body(reply)
        if failure is None:
            return data
    code = f"http_{reply.status}" if not 200 <= reply.status < 300 else failure.code
    return rec.Reject(prompt.id, code, f"POST {path}: {failure.message}")


def capture_one(opts: CaptureOptions, prompt: Prompt, model: str, source: dict[str, Any]) -> Any:
    """One prompt's record (a dict) or its Reject."""
    body = {**prompt.body, **ID_OPTIONS}
    body.setdefault("model", model)
    data = _post(opts, prompt, "/v1/chat/completions", body)
    if isinstance(data, rec.Reject):
        return data
    answer = rec.read_answer(prompt, data)
    if isinstance(answer, rec.Reject):
        return answer
    decoded = _post(
        opts,
        prompt,
        "/v1/detokenize",
        {"model": body["model"], "tokens": rec.text_ids(answer), "skip_special_tokens": False},
    )
    if isinstance(decoded, rec.Reject):
        return rec.Reject(prompt.id, "lossless_unchecked", f"the output ids could not be decoded: {decoded.message}")
    text = decoded.get("text") if isinstance(decoded, dict) else None
    if not isinstance(text, str):
        return rec.Reject(prompt.id, "lossless_unchecked", "/v1/detokenize answered no text")
    return rec.lossless(prompt, answer, text) or rec.build_record(prompt, answer, source)


class RateLine:
    """``capture: 12/100 records, 3.1/s, ETA 28 s`` at most twice a second (on a terminal; ``say`` None: silent)."""

    def __init__(self, say: Callable[[str], None] | None, total: int, done: int) -> None:
        self.say, self.total, self.start_done = say, total, done
        self.started = self.shown = time.monotonic()

    def update(self, done: int, failed: int, last: bool = False) -> None:
        now = time.monotonic()
        if self.say is None or (now - self.shown < 0.5 and not last):
            return
        self.shown = now
        rate = (done + failed - self.start_done) / max(now - self.started, 1e-6)
        left = self.total - done - failed
        eta = f"ETA {left / rate:.0f} s" if rate > 0 and left else "done" if not left else "ETA -"
        self.say(f"{done}/{self.total} records, {failed} failed, {rate:.1f}/s, {eta}")


def _select(opts: CaptureOptions, prompts: list[Prompt], books: rec.Books) -> list[Prompt]:
    """The prompts this run sends: the first --limit of the file without a record; their old rejects are dropped
    (they are retried)."""
    selected = prompts[: opts.limit] if opts.limit else prompts
    done = store.done_ids(opts.out / store.RECORDS)
    pending = [p for p in selected if p.id not in done]
    books.total, books.earlier = len(selected), len(selected) - len(pending)
    retried = {p.id for p in pending}
    rejects = store.load_rejects(opts.out / store.REJECTS)
    kept = [r for r in rejects if r["id"] not in retried and r["id"] not in done]
    if len(kept) != len(rejects):
        store.keep_rejects(opts.out / store.REJECTS, kept)
    return pending


def _start(results: SimpleQueue[tuple[Prompt, Any]], opts: CaptureOptions, prompt: Prompt, *args: Any) -> None:
    """One prompt's request in a daemon thread (Ctrl-C ends the run at once: only whole records are on disk), its
    result (or the exception of a bug) put on ``results``."""

    def work() -> None:
        try:
            results.put((prompt, capture_one(opts, prompt, *args)))
        except BaseException as exc:  # noqa: BLE001  (handed to the main thread, which raises it)
            results.put((prompt, exc))

    threading.Thread(target=work, name=f"capture-{prompt.line}", daemon=True).start()


def run_capture(
    opts: CaptureOptions, served_model: Callable[[], str], say: Callable[[str], None] | None = None
) -> tuple[rec.Books, str | None]:
    """Capture every selected prompt not yet recorded; the books and, when the server stopped answering, why the run
    stopped early (None: every prompt was tried)."""
    prompts = load(opts.prompts)
    store.prepare_out(opts.out)
    books = rec.Books()
    with directory_lock(opts.out, doing="is capturing into it (one capture per --out)"):
        pending = _select(opts, prompts, books)
        if not pending:
            return books, None
        model = opts.model or served_model()
        source = {"profile": opts.profile, "server": opts.target.base_url, "model": model}
        records, rejects = store.Appender(opts.out / store.RECORDS), store.Appender(opts.out / store.REJECTS)
        progress = RateLine(say, books.total, books.done)
        stopped: str | None = None
        streak, in_flight = 0, 0
        queue = iter(pending)
        results: SimpleQueue[tuple[Prompt, Any]] = SimpleQueue()
        try:
            while True:
                while stopped is None and in_flight < opts.concurrency:
                    nxt = next(queue, None)
                    if nxt is None:
                        break
                    _start(results, opts, nxt, model, source)
                    in_flight += 1
                if not in_flight:
                    break
                prompt, result = results.get()
                in_flight -= 1
                if isinstance(result, BaseException):
                    raise result  # a kimi-serve bug in a worker: exit 70, every whole record already on disk
                if isinstance(result, rec.Reject):
                    rejects.append(result.as_row(prompt.line), "capture.reject")
                    books.add_reject(result)
                    streak = streak + 1 if result.cause == "unreachable" else 0
                else:
                    records.append(result, "capture.record")
                    books.add_record(result)
                    streak = 0
                if streak >= UNREACHABLE_STREAK and stopped is None:
                    stopped = f"{opts.target.base_url} stopped answering ({streak} prompts in a row found no server)"
                progress.update(books.done, sum(books.failures.values()))
        finally:
            records.close()
            rejects.close()
        progress.update(books.done, sum(books.failures.values()), last=True)
        return books, stopped
