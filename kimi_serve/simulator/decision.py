"""The scripted model's tool decision: whether to call, which offered tools, how many calls, and the prompt's values.

Deterministic, and shaped like a model's choice rather than a keyword trigger (docs/simulator.md, "The scripted
model"): ``tool_choice`` first, then a prompt that declines tools or that no offered tool fits; several calls only
when the request asks for several distinct ones. Values for string arguments come from the prompt in any script:
quoted text, capitalised words, CJK phrases left over once common function words are taken out.
"""

from __future__ import annotations

import re
from typing import Any

from kimi_serve.simulator import intent
from kimi_serve.simulator.schema_strings import FILE_LIKE

_NUMBER_WORDS: dict[str, int] = intent.words()["number_words"]
_STOP_WORDS = frozenset(intent.words()["stop_words"])
# Words (Chinese mostly; stems elsewhere) for what tools commonly do, so a prompt in another language can match an
# English tool name or description.
_GLOSSES: dict[str, str] = intent.words()["glosses"]
_DECLINES = re.compile(
    r"\b(?:do\s+not|don'?t|never|shouldn'?t|should\s+not|must\s+not|please\s+don'?t)\s+(?:use|call|invoke|run)\s+"
    r"(?:any\s+|a\s+|the\s+)?(?:tools?|functions?|tool\s+calls?)\b"
    r"|\bwithout\s+(?:using\s+|calling\s+|any\s+)*(?:any\s+)?(?:tools?|functions?|tool\s+calls?)\b"
    r"|\bno\s+(?:tools?|tool\s+calls?|function\s+calls?)\b"
    r"|\b(?:just|simply)\s+(?:answer|reply|respond|tell\s+me)\b|\banswer\s+(?:directly|from\s+memory)\b"
    r"|(?:不要|不应|不应该|不用|无需|无须|别|不能|禁止|请勿|勿)(?:再)?(?:使用|调用|用)(?:任何)?(?:的)?(?:工具|函数)"
    r"|不(?:使用|调用)(?:任何)?(?:工具|函数)|直接回答",
    re.IGNORECASE,
)
_ASKS_FOR_TOOL = re.compile(
    r"\b(?:use|call|invoke|run)\s+(?:the\s+|a\s+|your\s+|its\s+)?(?:[\w.-]+\s+)?(?:tools?|functions?)\b"
    r"|(?:使用|调用|用)(?:一下)?(?:\S{0,6})?(?:工具|函数)",
    re.IGNORECASE,
)
_ONCE = re.compile(r"\b(?:exactly|only|just)\s+once\b|\bonce\b(?!\s+(?:for|per)\b)|只(?:调用)?一次", re.IGNORECASE)
_EACH = re.compile(r"\bonce\s+(?:for|per)\s+each\b|\bfor\s+each\b|\beach\s+of\b|\bin\s+parallel\b|分别|各", re.I)
_TIMES = re.compile(
    r"\b(\d|two|three|four|five)\s+(?:separate\s+|parallel\s+|distinct\s+)?"
    r"(?:calls|times|tool\s+calls|function\s+calls|requests|lookups|searches|queries)\b"
    r"|\b(twice|thrice)\b|([两二三四五])次",
    re.IGNORECASE,
)
_SEVERAL = re.compile(
    r"\b(\d|two|three|four|five)\s+(?:[^\W\d_]+\s+){0,2}?([^\W\d_]+s)\b|\bboth\b"
    r"|([两二三四五])(?:个|座)",
    re.IGNORECASE,
)
_AT_LEAST = re.compile(r"\b(?:at\s+(?:least|most)|no\s+(?:more|fewer|less)\s+than|up\s+to)\s+\S+", re.I)
_QUOTED = re.compile(
    r"\"([^\"]+)\"|`([^`]+)`|(?<!\w)'([^']+)'(?!\w)|“([^”]+)”|「([^」]+)」|『([^』]+)』|《([^》]+)》"
    r"|‘([^’]+)’"
)
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]+")
# Common Chinese function and request words: what is left of a CJK run without them is a value (a place, a name).
# Longest first, so a run is cut at the longest word that starts there.
_CJK_COMMON = re.compile("|".join(map(re.escape, sorted(intent.words()["cjk_common"], key=len, reverse=True))))


def offered(
    tools: list[dict[str, Any]], tool_choice: Any, messages: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The functions the model may call under ``tool_choice`` (empty: it answers in text). Kimi-K2.5's template shows
    the model only the request's tools; under "required" or a named function SGLang's grammar forces a call among its
    effective tools, which add those declared in root/system/developer messages, so the forced call may be one of
    those."""
    if tool_choice == "none":
        return []
    if tool_choice == "required" or isinstance(tool_choice, dict):
        tools = tools + [
            t
            for m in messages or []
            if m.get("role") in ("root", "system", "developer") and isinstance(m.get("tools"), list)
            for t in m["tools"]
            if isinstance(t, dict)
        ]
    functions = [t["function"] for t in tools if t.get("type", "function") == "function" and t.get("function")]
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        return [f for f in functions if f.get("name") == wanted] or functions
    return functions


def declines(prompt: str) -> bool:
    """The prompt asks for an answer without tools (or says not to do what a tool does: "don't look it up")."""
    return bool(_DECLINES.search(prompt) or intent.SAYS_NOT_TO.search(prompt))


def choose(functions: list[dict[str, Any]], prompt: str, tool_choice: Any = "auto") -> list[dict[str, Any]]:
    """The calls to make, in order (one entry per call; a function may repeat). Empty: no call."""
    forced = tool_choice == "required" or isinstance(tool_choice, dict)
    if not functions or (not forced and declines(prompt)):
        return []
    values = candidates(prompt)
    asked = _asks_for_tool(functions, prompt)
    if (
        not forced
        and not asked
        and intent.KNOWLEDGE.search(prompt.strip())
        and not intent.has_object_for(functions, prompt, values)
    ):
        return []  # a question of knowledge, nothing a tool would act on
    # the prompt's words, and the tool words its requests stand for ("open config.yaml" reads a file): intent.py
    prompt_words = words(prompt).union(*(intent.request_words(fn, prompt, values) for fn in functions))
    scored = sorted(enumerate(functions), key=lambda p: (-score(p[1], prompt_words), p[0]))
    matching = [fn for _, fn in scored if score(fn, prompt_words) > 0]
    if not matching and not forced and not asked:
        return []
    pool = matching or [scored[0][1]]
    count = requested_count(prompt, len(values))
    if not count:  # the prompt names no number of calls: one per tool it names, or per value it joins
        named = _distinct(matching, prompt_words)
        if len(named) > 1 and re.search(r"\band\b|和|以及|并且|然后", _unquoted(prompt).lower()):
            pool, count = named, len(named)
        elif len(pool) == 1 and _single_value_tool(pool[0]):
            count = joined_values(prompt)
        else:
            count = 1
    chosen = [pool[i % len(pool)] for i in range(count)] if len(pool) < count else pool[:count]
    if len({fn["name"] for fn in chosen}) == len(chosen):  # distinct tools: in the order the prompt names them
        chosen.sort(key=lambda fn: anchor(fn, prompt))
    return chosen


def _distinct(matching: list[dict[str, Any]], prompt_words: set[str]) -> list[dict[str, Any]]:
    """The matching tools the prompt names by a word of their own (not only one a better match shares: "read the
    file" names read_file, not write_file as well)."""
    named: list[dict[str, Any]] = []
    seen: set[str] = set()
    for fn in matching:
        own = (_name_words(fn) | words(str(fn.get("description", "") or ""))) & prompt_words
        if own - seen:
            named.append(fn)
        seen |= own
    return named


def _single_value_tool(fn: dict[str, Any]) -> bool:
    """A tool that takes one required string (a city, a query): values joined by "and" mean one call each."""
    params = fn.get("parameters")
    props = intent.props(fn)
    strings = [
        k
        for k in (params.get("required") if isinstance(params, dict) else None) or []
        if isinstance(props.get(k), dict) and props[k].get("type", "string") == "string" and not props[k].get("enum")
    ]
    return len(strings) == 1


def _asks_for_tool(functions: list[dict[str, Any]], prompt: str) -> bool:
    lowered = prompt.lower()
    return bool(_ASKS_FOR_TOOL.search(prompt)) or any(
        re.search(rf"\b{re.escape(str(fn.get('name', '')).lower())}\b", lowered) for fn in functions if fn.get("name")
    )


def _unquoted(prompt: str) -> str:
    return _QUOTED.sub(" ", prompt)


def requested_count(prompt: str, values: int) -> int:
    """How many calls the request asks for: explicit counts of calls, or of things when the prompt names that many;
    0 when it says nothing about how many."""
    text = _AT_LEAST.sub(" ", _unquoted(prompt))
    times = _TIMES.search(text)
    if times:
        word = (times.group(1) or times.group(3) or "").lower()
        return {"twice": 2, "thrice": 3}.get((times.group(2) or "").lower()) or _NUMBER_WORDS.get(word, 1)
    if _ONCE.search(text) and not _EACH.search(text):
        return 1
    several = _SEVERAL.search(text)
    if several:
        word = (several.group(1) or several.group(3) or "").lower()
        n = _NUMBER_WORDS.get(word, 2) if word else 2
        if values >= n:
            return n
    if _EACH.search(text) and values >= 2:
        return values
    return 0


def joined_values(prompt: str) -> int:
    """How many prompt values stand joined by "and"/"和"/"、" ("Paris and London", "北京和上海"): one call each."""
    found = positioned(prompt)
    best = run = 1
    for (pos_a, a), (pos_b, _) in zip(found, found[1:], strict=False):
        between = prompt[pos_a + len(a) : pos_b]
        run = (
            run + 1
            if re.fullmatch(r"\s*(?:,|and|&|or|和|与|及|、|，)\s*(?:and\s+)?(?:in\s+|for\s+)?", between, re.IGNORECASE)
            else 1
        )
        best = max(best, run)
    return best


def words(text: str) -> set[str]:
    """Content words of ``text``: Latin words (not stop words), CJK glosses and CJK character pairs."""
    lowered = text.lower()
    found = {
        w for w in re.findall(r"[^\W_]+", lowered) if w not in _STOP_WORDS and len(w) > 1 and not _CJK_RUN.search(w)
    }
    for zh, en in _GLOSSES.items():
        if zh in lowered:
            found |= set(en.split())
    for run in _CJK_RUN.findall(text):
        found |= {run[i : i + 2] for i in range(len(run) - 1)}
    return found


def _name_words(fn: dict[str, Any]) -> set[str]:
    return words(str(fn.get("name", "")).replace("_", " ").replace("-", " ").replace(".", " "))


def score(fn: dict[str, Any], prompt_words: set[str]) -> int:
    desc_words = words(str(fn.get("description", "") or ""))
    return 3 * len(_name_words(fn) & prompt_words) + len(desc_words & prompt_words)


def anchor(fn: dict[str, Any], prompt: str) -> int:
    """Where the prompt first mentions one of the function's words (len(prompt) if nowhere)."""
    lowered = prompt.lower()
    own = _name_words(fn) | words(str(fn.get("description", "") or ""))
    hits = [m.start() for w in own if w.isascii() for m in re.finditer(rf"\b{re.escape(w)}", lowered)]
    hits += [lowered.find(zh) for zh, en in _GLOSSES.items() if zh in lowered and set(en.split()) & own]
    return min(hits, default=len(prompt))


def hints_per_call(chosen: list[dict[str, Any]], prompt: str) -> list[list[str]]:
    """String values for each call: distinct tools take the prompt values after their own mention; repeated calls of
    one tool take the prompt's values in turn ("weather for two cities: Paris and London")."""
    found = candidates(prompt)
    if len({fn["name"] for fn in chosen}) < len(chosen) or len(chosen) == 1:
        return [found[i:] + found[:i] for i in range(len(chosen))]
    anchors = [anchor(fn, prompt) for fn in chosen] + [len(prompt) + 1]
    hints = []
    for i in range(len(chosen)):
        own = [v for pos, v in positioned(prompt) if anchors[i] <= pos < anchors[i + 1]]
        hints.append(own + [v for v in found if v not in own])
    return hints


def positioned(prompt: str) -> list[tuple[int, str]]:
    """Values the prompt offers for string arguments, with their positions: quoted text, capitalised words (any
    cased script; not the first word of a sentence), CJK phrases."""
    quoted = [(m.start(), next(g for g in m.groups() if g)) for m in _QUOTED.finditer(prompt)]
    spans = [(m.start(), m.end()) for m in _QUOTED.finditer(prompt)]
    spans += [(m.start(), m.end()) for m in FILE_LIKE.finditer(prompt)]  # "README" of README.md is no name
    outside = [m for m in re.finditer(r"[^\W\d_]{2,}", prompt) if not any(a <= m.start() < b for a, b in spans)]
    proper = [
        (m.start(), m.group())
        for m in outside
        if m.group()[0].isupper() and _mid_sentence(prompt, m.start()) and not _CJK_RUN.match(m.group())
    ]
    cjk = [
        (pos, phrase)
        for m in _CJK_RUN.finditer(prompt)
        if not any(a <= m.start() < b for a, b in spans)
        for pos, phrase in _cjk_phrases(m.group(), m.start())
    ]
    return sorted(quoted + proper + cjk)


def _mid_sentence(prompt: str, pos: int) -> bool:
    before = prompt[:pos]
    return bool(before) and before[-1].isspace() and not re.search(r"[.?!]\s*$", before)


def _cjk_phrases(run: str, start: int) -> list[tuple[int, str]]:
    """A CJK run split at common words; the pieces of two or more characters are values."""
    cuts = [0, *(i for m in _CJK_COMMON.finditer(run) for i in m.span()), len(run)]
    return [(start + a, run[a:b]) for a, b in zip(cuts[::2], cuts[1::2], strict=True) if b - a >= 2]


def quoted(prompt: str) -> list[str]:
    """The prompt's quoted values, in order."""
    return [next(g for g in m.groups() if g) for m in _QUOTED.finditer(prompt)]


def candidates(prompt: str) -> list[str]:
    """Quoted values first, then the other values in prompt order."""
    first = quoted(prompt)
    return list(dict.fromkeys(first + [v for _, v in positioned(prompt) if v not in first]))
