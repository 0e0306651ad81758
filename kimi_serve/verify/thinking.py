"""Reasoning where clients do not expect it, found cheaply in one answer (the quick suite): think markers of every
Kimi family in a text field, and ``content`` that repeats ``reasoning_content`` (the full suite's lossless check finds
the latter too, by rebuilding the raw text; this finds it from the two fields alone).

Kimi models mark reasoning in more than one way: Kimi-K2/K2.5 ``<think>``…``</think>``, Kimi-VL and Kimi k1.5
``◁think▷``…``◁/think▷`` (SGLang's ``kimi`` reasoning parser), Kimi K3 ``<|open|>think<|sep|>``…
``<|close|>think<|sep|>`` (its ``kimi_k3`` parser). A client shows any of them as answer text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    pattern: re.Pattern[str]


FAMILIES = (
    Family("`<think>`…`</think>` (Kimi-K2/K2.5's own)", re.compile(r"</?think>")),
    Family("`◁think▷`…`◁/think▷` (Kimi-VL's and Kimi k1.5's)", re.compile(r"◁/?think▷")),
    Family(
        "`<|open|>think<|sep|>`…`<|close|>think<|sep|>` (Kimi K3's)",
        re.compile(r"<\|(?:open|close)\|>think(?:<\|sep\|>)?"),
    ),
)
ANY_MARKER = re.compile("|".join(f.pattern.pattern for f in FAMILIES))


def marker(text: str) -> tuple[str, Family] | None:
    """The first think marker in ``text`` of any Kimi family, with its family; None when there is none."""
    for family in FAMILIES:
        if m := family.pattern.search(text):
            return m.group(0), family
    return None


_MIN_ECHO = 16  # non-space characters: shorter reasoning ("391") may equal a short answer by chance
_PREFIX = 80  # a long reasoning's first characters at the start of content are an echo too (a cut copy)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", ANY_MARKER.sub(" ", text)).strip()


def echoed_reasoning(content: str, reasoning: str) -> bool:
    """``content`` repeats ``reasoning_content`` (the whole of it anywhere, or its first 80 characters at the start),
    compared with whitespace and think markers squashed."""
    body, thought = _squash(content), _squash(reasoning)
    if len(thought.replace(" ", "")) < _MIN_ECHO:
        return False
    return thought in body or (len(thought) > _PREFIX and body.startswith(thought[:_PREFIX]))
