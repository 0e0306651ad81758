"""A request's own stops, as SGLang 0.5.23's scheduler finds them and its detokenizer trims them: the first
``stop_token_ids`` id (counted, not shown) or the first token whose decoded output holds a ``stop`` string (cut before
it; through it with ``no_stop_trim``), searched over the whole raw output. While streaming, a tail that could begin a
stop string is held back. ``ignore_eos`` does not disable stop strings; stop regexes are not simulated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stopped:
    ids: list[int]  # the output ids up to the stop (a matched stop token excluded)
    matched: int | str  # SGLang's finish_reason.matched
    text: str | None  # the final (trimmed) text for a stop string, None when the ids decode to it


def find_stop(tokenizer: Any, ids: list[int], params: Any, skip: frozenset[int]) -> Stopped | None:
    """The request's first stop in ``ids`` (None: no stop of the request's own)."""
    stop_ids = set(params.stop_token_ids or ()) if not params.ignore_eos else set()
    token_at = next((i for i, t in enumerate(ids) if t in stop_ids), None)
    strs = [s for s in (params.stop_strs or []) if s]
    if strs:
        limit = token_at if token_at is not None else len(ids)
        text = _decode(tokenizer, ids[:limit], skip)
        if any(s in text for s in strs):
            lo, hi = 1, limit  # the fewest tokens whose text holds a stop string (decoding is monotone in length)
            while lo < hi:
                mid = (lo + hi) // 2
                if any(s in _decode(tokenizer, ids[:mid], skip) for s in strs):
                    hi = mid
                else:
                    lo = mid + 1
            text = _decode(tokenizer, ids[:lo], skip)
            matched = min((s for s in strs if s in text), key=text.find)
            pos = text.find(matched)
            end = pos + len(matched) if params.no_stop_trim else pos
            return Stopped(ids[:lo], matched, text[:end])
    if token_at is not None:
        return Stopped(ids[:token_at], ids[token_at], None)
    return None


def holds_back(text: str, params: Any) -> bool:
    """Whether the output so far ends in what may begin a stop string (SGLang then delays the stream chunk)."""
    return any(
        s in text or any(text.endswith(s[:i]) for i in range(1, len(s) + 1)) for s in params.stop_strs or [] if s
    )


def _decode(tokenizer: Any, ids: list[int], skip: frozenset[int]) -> str:
    return str(tokenizer.decode([i for i in ids if i not in skip], skip_special_tokens=False))
