"""The one reader of a stream (:class:`StreamReader`): server-sent events -> :class:`Answer`, content, reasoning and
tool-call fragments (by index) reassembled as the openai SDK does, within verify's bounds; used by every probe
(:func:`answer_from_sse`) and by ``chat`` (piece by piece, shown as it arrives)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.pin import KIMI_PATCH_SET, patch_set_args, patches_apply
from kimi_serve.verify import wire
from kimi_serve.verify.accumulate import Merge, finish, merge_delta
from kimi_serve.verify.answer import Answer, as_object, message_answer, tool_call
from kimi_serve.verify.report import problem, warning
from kimi_serve.verify.sse import SseEvent, SseFeed, iter_events

_SHOW = 160
# No bytes for this long: the stream is stalled (the transport stops it). One that keeps sending is only slow.
STALL_SECONDS = 30.0


_CHUNK_OBJECT = "chat.completion.chunk"
_FIX_WIRE = (
    "SGLang's own stream has this shape right; a proxy or another server in between rewrites the chunks: "
    "point --host at SGLang itself or configure the proxy to pass server-sent events through unchanged"
)


def _sse_problem(faults: list[str]) -> Finding:
    shown = "; ".join(faults[:3]) + (f"; and {len(faults) - 3} more" if len(faults) > 3 else "")
    return problem(
        "stream_sse_field",
        f"the stream has SSE fields the openai SDK's stream reader fails on: {shown}. The SDK "
        "dispatches such a block as an event without data (an event id persists across events, as the SSE "
        "specification says) and raises json.JSONDecodeError on it (or, for `thread.*`, loses the chunk), so the "
        "client's stream is lost",
        "SGLang's own stream sends only `data:` lines; a gateway or proxy in between adds event ids, retry "
        "directives, event names or keep-alives: configure it to pass server-sent events through unchanged (or to "
        "send no event ids with its keep-alives), or point --host at SGLang itself",
    )


def _null_continuation(delta: dict[str, Any], message: dict[str, Any]) -> bool:
    """A tool-call delta for a call already started that sends ``"id": null`` or ``"name": null``."""
    started = message.get("tool_calls")
    count = len(started) if isinstance(started, list) else 0
    entries = delta.get("tool_calls")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("index"), int) or entry["index"] >= count:
            continue
        fn = entry.get("function")
        if ("id" in entry and entry["id"] is None) or (isinstance(fn, dict) and "name" in fn and fn["name"] is None):
            return True
    return False


_NULL_FIELDS = warning(
    "stream_null_tool_fields",
    'streamed tool-call argument deltas carry "id": null and "function.name": null (SGLang 0.5.23\'s serving layer '
    "without kimi-serve's Kimi patch set, sgl-project/sglang#35542): the openai SDK reads the call whole, but "
    "clients and proxies that copy each delta's fields over the call lose its id and name; such a server also "
    "has the set's other kimi_k2 faults (a call with an id outside functions.NAME:N dropped, a bare "
    "<|tool_call_begin|> parsed only when streaming)",
    f"apply the Kimi patch set to the engine ({patches_apply(patch_set_args(KIMI_PATCH_SET))}), then restart",
)


def _carries_data(choices: Any) -> bool:
    return isinstance(choices, list) and any(
        isinstance(c, dict) and (as_object(c.get("delta")) or c.get("finish_reason")) for c in choices
    )


def _check_tool_lookup(delta: dict[str, Any], message: dict[str, Any], merge: Merge) -> None:
    """The SDK looks every tool-call delta up by its index after merging a chunk (``tool_calls[delta.index]``)."""
    stored = message.get("tool_calls")
    for entry in delta.get("tool_calls") or [] if isinstance(delta.get("tool_calls"), list) else []:
        index = entry.get("index") if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool):
            merge.add(
                "stream_tool_index",
                f"a streamed tool-call delta has index {wire.shown(index)}, not an integer: the "
                "openai SDK cannot place it (TypeError) and the stream is lost",
            )
        elif not isinstance(stored, list) or index >= len(stored):
            merge.add(
                "stream_tool_index",
                f"a streamed tool-call delta has index {index} but only "
                f"{len(stored) if isinstance(stored, list) else 0} call(s) exist: the openai SDK raises "
                "IndexError; indices must count up from 0",
            )


def stall_limit(timeout: float) -> float:
    """Seconds without a byte that make a stream "stalled": STALL_SECONDS, or half the timeout when that is shorter."""
    return min(STALL_SECONDS, timeout / 2)


def _stall_problem(events: int, stalled: bool, idle_s: float | None, stall_s: float | None) -> Finding:
    if stalled:
        return problem(
            "timeout",
            f"the stream stalled: no bytes for {stall_s or 0:g}s after {events} events",
            "the server hangs mid-generation; read its log",
        )
    if stall_s is not None and idle_s is not None:
        return problem(
            "too_slow",
            f"the stream was still arriving when the time ran out ({events} events; the last "
            f"byte {idle_s:.1f}s before the deadline, no pause reached the {stall_s:g}s stall limit): the "
            "server is slow, not hung",
            "raise the profile's verify.timeout (or --timeout) if this speed is expected; else read the "
            "server's decode speed in its log",
        )
    return problem(
        "timeout",
        f"the stream did not finish before the deadline ({events} events received)",
        "the server hangs or is slow; read its log, or raise --timeout",
    )


class StreamReader:
    """SSE events (the whole body, or piece by piece through :meth:`feed`) -> chunks decoded within verify's bounds
    (the deadline checked every 512 events) -> deltas merged as the openai SDK does; :meth:`answer` says what is
    wrong with the stream itself. ``containers``: the budget all chunks share (None: each chunk its own, for chat).
    ``on_delta``: called with each delta merged (chat shows its text as it arrives).
    """

    def __init__(
        self,
        *,
        deadline: float | None = None,
        containers: wire.Containers | None = None,
        on_delta: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.deadline, self.containers, self.on_delta = deadline, containers, on_delta
        self.problems: list[Finding] = []
        self.merge = Merge()
        self.message: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.error: str | None = None  # the first error the server sent mid-stream
        self.faults: dict[str, None] = {}  # what the SDK's reader fails on, each once, in order
        self.count = 0  # data events read
        self.limit: str | None = None  # a wire bound a chunk passed: reading stopped there
        self.done = self.nulls = self.late = self.stopped = False
        self._feed: SseFeed | None = None

    def feed(self, piece: bytes) -> None:
        """The bytes that arrived (chat's stream as it comes)."""
        self._feed = self._feed or SseFeed()
        self.read(self._feed.feed(piece))

    def read(self, events: Iterable[SseEvent]) -> None:
        for event in events:
            if self.stopped:
                return
            self.event(event)

    def event(self, event: SseEvent) -> None:
        if event.fault is not None:
            self.faults.setdefault(event.fault)
            return
        data = event.data
        if data.strip().startswith("[DONE]"):
            self.done = self.stopped = True  # the SDK stops reading here
            return
        if self.deadline is not None and self.count % 512 == 511 and time.monotonic() > self.deadline:
            self.late = self.stopped = True  # too many chunks to merge before the deadline
            return
        self.count += 1
        try:
            chunk = wire.loads(data, self.containers)
        except wire.WireLimit as exc:
            self.limit, self.stopped, self.count = exc.limit, True, self.count - 1
            return
        except ValueError:
            self._once("stream_bad_chunk", f"a stream chunk is not JSON: {data[:_SHOW]!r}")
            return
        if isinstance(chunk, dict) and chunk.get("error"):
            err = chunk["error"]
            text = str(err.get("message", err) if isinstance(err, dict) else err)
            self.error = self.error or text[:300]
            self._once("stream_error", f"the server sent an error mid-stream: {text[:_SHOW]}")
        elif not isinstance(chunk, dict):
            self._once("stream_bad_chunk", f"a stream chunk is not a JSON object: {data[:_SHOW]!r}")
        elif chunk.get("object") != _CHUNK_OBJECT:
            if _carries_data(chunk.get("choices") or []):
                self.merge.add(
                    "stream_chunk_object",
                    f"a chunk with data has object {wire.shown(chunk.get('object'), 'none', _SHOW)}, not "
                    f"{_CHUNK_OBJECT!r}: the openai SDK's stream helper skips such chunks, so their text is lost",
                )
        else:
            choices = chunk.get("choices") or []
            for choice in choices if isinstance(choices, list) else []:
                self._choice(as_object(choice))

    def _choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            self.merge.add(
                "stream_choice_index",
                f"a stream choice has index {wire.shown(index, 'missing', _SHOW)}, not an integer: the openai "
                "SDK cannot place it (TypeError) and the stream is lost",
            )
            index = 0
        if index != 0:
            return
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            if delta is not None or not choice.get("finish_reason"):
                self.merge.add(
                    "stream_no_delta",
                    f"a stream choice has no `delta` object (it is {wire.shown(delta, 'missing', _SHOW)})",
                )
        else:
            self.nulls = self.nulls or _null_continuation(delta, self.message)
            if self.on_delta is not None:
                self.on_delta(delta)
            merge_delta(self.message, delta, "delta", self.merge)
            _check_tool_lookup(delta, self.message, self.merge)
        if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
            self.finish_reason = choice["finish_reason"]

    def _once(self, code: str, message: str) -> None:
        """A fault of one chunk, named for the first such chunk only (a stream of bad chunks is one finding)."""
        if all(p.code != code for p in self.problems):
            fix = (
                "read the SGLang log for this request"
                if code == "stream_error"
                else "check the server log for the request; the stream is corrupt"
            )
            self.problems.append(problem(code, message, fix))

    def answer(
        self,
        *,
        timed_out: bool = False,
        cut: bool = False,
        stalled: bool = False,
        idle_s: float | None = None,
        stall_s: float | None = None,
    ) -> Answer:
        """The answer as the openai SDK reassembles it, with what is wrong with the stream itself. ``timed_out``/
        ``cut``/``stalled``/``idle_s``/``stall_s``: how reading ended (core.http.Reply), to tell a hung stream (no
        bytes for ``stall_s``) from a slow one (still arriving at the deadline) and a broken connection."""
        limit, count, done = self.limit, self.count, self.done
        timed_out = timed_out or limit is not None  # cut at a read limit: judged as cut there
        late = self.late and not timed_out  # read whole in time, then too many chunks to merge before the deadline
        message = finish(self.message)
        answer = message_answer(message, finish_reason=self.finish_reason, problems=list(self.problems))
        if self.faults:
            answer.problems.insert(0, _sse_problem(list(self.faults)))
        answer.problems += [problem(code, text, _FIX_WIRE) for code, text in self.merge.faults]
        raw_calls = message.get("tool_calls")
        answer.tool_calls = [tool_call(c, i) for i, c in enumerate(raw_calls if isinstance(raw_calls, list) else [])]
        ended = not timed_out and not late
        if message.get("role") is None and answer.finish_reason and not self.merge.faults and ended:
            answer.problems.append(
                problem(
                    "stream_no_role",
                    'no chunk carried `role: "assistant"`: the openai SDK\'s '
                    "message has role None, which a client cannot send back as history",
                    _FIX_WIRE,
                )
            )
        if self.nulls:
            answer.warnings.append(_NULL_FIELDS)
        if late:
            answer.problems.append(
                problem(
                    "timeout",
                    f"verify's --timeout ran out while it read the stream's events (after {count}): the server sends "
                    "an answer in more chunks than verify can read in time",
                    "the server or a proxy splits the answer into very many chunks; read its log, or raise --timeout",
                )
            )
        elif limit:
            answer.problems.append(
                problem(
                    "too_large",
                    f"the stream passed verify's read limit ({limit}) after {count} events and was cut off there",
                    "the server sends an endless or oversized stream; read its log, and check that --host is "
                    "SGLang's OpenAI server (not a proxy or another service)",
                )
            )
        elif timed_out:
            answer.problems.append(_stall_problem(count, stalled, idle_s, stall_s))
        elif not done and (cut or answer.finish_reason is None):
            how = "the connection broke" if cut else "the stream ended"
            answer.problems.append(
                problem(
                    "stream_no_done",
                    f"{how} without `data: [DONE]` ({count} events)",
                    "the stream is truncated; read the SGLang log for an error on this request",
                )
            )
        elif not done:
            answer.warnings.append(
                warning(
                    "stream_no_done",
                    f"the stream ended cleanly after finish_reason "
                    f"{wire.shown(answer.finish_reason)} but without `data: [DONE]`: the openai SDK reads it "
                    "whole, clients that wait for [DONE] hang",
                    _FIX_WIRE,
                )
            )
        if answer.finish_reason is None and ended:
            answer.problems.append(
                problem(
                    "stream_no_finish_reason",
                    "no chunk carried a finish_reason",
                    "the stream is truncated or the server is not SGLang's OpenAI server",
                )
            )
        return answer


def answer_from_sse(
    body: bytes,
    *,
    timed_out: bool = False,
    cut: bool = False,
    stalled: bool = False,
    idle_s: float | None = None,
    stall_s: float | None = None,
    limit: str | None = None,
    deadline: float | None = None,
) -> Answer:
    """A whole streamed body through :class:`StreamReader` (how reading ended: :meth:`StreamReader.answer`).
    ``limit``: reading stopped at this read limit (core.http_body.LIMITS); the whole events that came are judged for
    wire faults only. ``deadline`` (``time.monotonic()``): reading the events stops there too, so a stream of many
    small chunks cannot hold verify past its --timeout."""
    end = len(body)
    if limit:
        last = body.rfind(b"\n\n")
        end = last + 2 if last >= 0 else 0  # read up to there (not a copy of 16 MiB)
    elif b"data:" not in body and body and not body.isspace() and next(iter_events(body), None) is None:
        return Answer(
            problems=[
                problem(
                    "stream_not_sse",
                    f"stream=true answered with a non-SSE body: {body[:_SHOW].decode('utf-8', 'replace')!r}",
                    "point --host at SGLang's OpenAI server; a proxy in between must pass server-sent events through",
                )
            ]
        )
    reader = StreamReader(deadline=deadline, containers=wire.Containers(wire.MAX_CONTAINERS))
    reader.limit = limit
    reader.read(iter_events(body, end))
    return reader.answer(timed_out=timed_out, cut=cut, stalled=stalled, idle_s=idle_s, stall_s=stall_s)
