"""The scripted model's sense of what a request is for, beyond the words it shares with a tool (decision.py).

A stand-in, not understanding: a small lexicon (data/words.json "kinds") of what common tools do, the words requests
for them use and the object each tool's parameters take. Under ``tool_choice: "auto"`` a **task** (a request word of
the tool's kind plus its object: "Open config/settings.yaml" with ``read_file(path)``) calls the tool; a
**knowledge** request with no object for any tool, or one that **says not to** ("don't look it up"), is answered in
text; a **change** (write, edit, delete, run) is asked for only in the affirmative (:func:`asks_for`).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from kimi_serve.core.resources import simulator_data
from kimi_serve.simulator.schema_strings import FILE_LIKE


@functools.cache
def words(name: str = "words.json") -> dict[str, Any]:
    """A word list of the scripted model (``data/words.json``; tasks.py's ``data/tasks.json``), kept as data."""
    loaded: dict[str, Any] = json.loads(simulator_data(name).read_text(encoding="utf-8"))
    return loaded


def props(fn: dict[str, Any]) -> dict[str, Any]:
    """The ``properties`` of a tool's parameters schema ({} when it has none)."""
    params = fn.get("parameters")
    found = params.get("properties") if isinstance(params, dict) else None
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class Kind:
    """A kind of tool: the words that mark a tool as one (its name, description, parameter names), the words of a
    request for it (mapped to the tool's own vocabulary: "open" reads), and the parameter keys of its object."""

    marks: frozenset[str]
    requests: dict[str, str]  # request word -> the tool word it stands for
    object_keys: re.Pattern[str]
    object: str  # "path", "place" or "topic"


# The kinds of tool, first match wins (data/words.json "kinds")
KINDS = tuple(
    Kind(
        frozenset(k["marks"]),
        {request: tool for tool, requests in k["requests"].items() for request in requests},
        re.compile(k["object_keys"], re.IGNORECASE),
        k["object"],
    )
    for k in words()["kinds"]
)

KNOWLEDGE = re.compile(
    r"^\W*(?:please\s+|can\s+you\s+|could\s+you\s+)?(?:explain|why\b|how\s+(?:does|do|did|is|are|can|would)\b|define|"
    r"describe|summari[sz]e|tell\s+me\s+about|what\s+(?:is|are)\s+(?:a|an)\b|what\s+does\s+.+\s+mean|"
    r"give\s+me\s+an?\s+(?:overview|explanation|summary)|write\s+(?:a|an)\s+(?:poem|haiku|story|essay|joke))"
    r"|\bin\s+general\b|\bconceptually\b|\bin\s+theory\b",
    re.IGNORECASE,
)
SAYS_NOT_TO = re.compile(
    r"\b(?:do\s+not|don'?t|never|no\s+need\s+to|without)\s+(?:look(?:ing)?\s+(?:it|that|this|anything)?\s*up|"
    r"search(?:ing)?\b|brows(?:e|ing)\b|googl(?:e|ing)\b|"
    r"(?:open(?:ing)?|read(?:ing)?|check(?:ing)?|access(?:ing)?|touch(?:ing)?)\s+(?:it|that|anything|the\s+files?|"
    r"any\s+files?)\b)"
    r"|\boff\s+the\s+top\s+of\s+your\s+head\b|\bfrom\s+(?:your\s+own\s+)?(?:memory|knowledge)\b"
    r"|(?:不用|不要|别|无需|不必)(?:去)?(?:查|搜索|搜|打开|读取)",
    re.IGNORECASE,
)
_PLACE_AFTER = re.compile(r"\b(?:in|at|near|around)\s+([A-Za-z][\w'-]+)")
_NOT_PLACES = frozenset(words()["not_places"])  # words after "in"/"at" that are not a place
_PROMPT_WORD = re.compile(r"[^\W_]+(?:'[a-z]+)?|[\u3400-\u9fff]", re.IGNORECASE)


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[^\W\d_]+", text.replace("_", " ").replace("-", " "))}


def _kind(fn: dict[str, Any]) -> Kind | None:
    """The kind of tool ``fn`` is: the first kind its name, description or parameter keys mark it as."""
    keys = [k for k in props(fn) if isinstance(k, str)]
    own = _words(f"{fn.get('name', '')} {fn.get('description', '') or ''}")
    for kind in KINDS:
        if own & kind.marks or (any(kind.object_keys.match(k) for k in keys) and own & set(kind.requests.values())):
            return kind
    return None


def _has_object(kind: Kind, prompt: str, values: list[str]) -> bool:
    if kind.object == "path":
        return bool(FILE_LIKE.search(prompt)) or any("/" in v or FILE_LIKE.fullmatch(v) for v in values)
    if kind.object == "place":
        return bool(values) or any(m.group(1).lower() not in _NOT_PLACES for m in _PLACE_AFTER.finditer(prompt))
    return len(_words(prompt) - set(kind.requests)) >= 2  # a topic: anything beyond the request words


def request_words(fn: dict[str, Any], prompt: str, values: list[str]) -> set[str]:
    """The tool words a request for ``fn`` stands for ("open" -> "read"): empty unless the prompt both uses a request
    word of the tool's kind and names the object the tool takes."""
    kind = _kind(fn)
    if kind is None:
        return set()
    lowered = prompt.lower()
    found = {w.lower() for w in _PROMPT_WORD.findall(lowered)}
    found |= {w for w in kind.requests if not w.isascii() and w in prompt}
    wanted = {kind.requests[w] for w in found if w in kind.requests}
    if not wanted or not _has_object(kind, prompt, values):
        return set()
    return wanted | {w for w, meant in kind.requests.items() if meant in wanted}  # "open_file" is named by "show" too


def has_object_for(functions: list[dict[str, Any]], prompt: str, values: list[str]) -> bool:
    """Some offered tool's parameters take an object the prompt names (a path, a place; a topic does not count: any
    prompt has one)."""
    for fn in functions:
        kind = _kind(fn)
        if kind is not None and kind.object != "topic" and _has_object(kind, prompt, values):
            return True
    return False


_TOPIC_LEAD = re.compile(
    r"^\W*(?:please\s+)?(?:(?:can|could)\s+you\s+)?(?:search(?:\s+the\s+web|\s+online)?(?:\s+for)?|look\s+up|"
    r"find(?:\s+me)?(?:\s+out)?|google|research)\s+(?:(?:the|some)\s+)?"
    r"(?:(?:latest|recent|newest|current)\s+)?(?:(?:news|updates|headlines)\s+)?(?:about\s+|on\s+|for\s+|of\s+)?",
    re.IGNORECASE,
)


def topic(fn: dict[str, Any], prompt: str) -> str | None:
    """The query a search tool takes for the request: the prompt without its request words ("Look up the
    population of Tokyo" -> "population of Tokyo"); None for other tools."""
    kind = _kind(fn)
    if kind is None or "search" not in kind.requests.values():
        return None
    text = _TOPIC_LEAD.sub("", prompt.strip()).strip().rstrip("?.!").strip()
    return text or None


def phrases(items: list[str]) -> str:
    """An alternation of word-list phrases: whole words for Latin ones (spaces stand for any whitespace), as written
    for CJK ones."""
    latin = [p.replace(" ", r"\s+") for p in items if p.isascii()]
    other = [re.escape(p) for p in items if not p.isascii()]
    return "|".join([rf"(?<![\w'])(?:{'|'.join(latin)})(?![\w'])", *other])


_CHANGES = words()["changes"]
_NOT_ASKED = re.compile(
    phrases(_CHANGES["negations"] + _CHANGES["questions"] + _CHANGES["lookups"] + _CHANGES["hypotheticals"]),
    re.IGNORECASE,
)
_QUESTION = re.compile(rf"^\W*(?:{phrases(_CHANGES['questions'] + _CHANGES['question_starts'])})", re.IGNORECASE)
_ASKED_ANYWAY = re.compile(phrases(_CHANGES["still_asks"]), re.IGNORECASE)
_QUESTION_END = re.compile(rf"(?:{'|'.join(map(re.escape, _CHANGES['question_ends']))})\W*$")
_BOUNDARY = re.compile(rf"([,;:()\u2014\u2013，；：]|{phrases(_CHANGES['boundaries'])})", re.IGNORECASE)
_GOVERNING = [n for n in _CHANGES["negations"] if n not in ("no", "nor")]  # "No, delete it" answers, then asks
_BARE_NEGATION = re.compile(rf"\W*(?:please\s+)?(?:{phrases(_GOVERNING)})\W*", re.IGNORECASE)
_NONE_AFTER = re.compile(rf"\W*\w+\s+(?:{phrases(_CHANGES['objects_none'])})", re.IGNORECASE)
_QUOTED_SPAN = re.compile(r"`[^`]*`|\"[^\"]*\"|(?<!\w)'[^']*'(?!\w)|“[^”]*”")


def asks_for(sentence: str, start: int) -> bool:
    """The request phrase at ``start`` of ``sentence`` (a change: "delete", "overwrite", "run") is asked for in the
    affirmative: the sentence is no question ("Should I run X?"; "Can you delete X?" asks) and its clause up to the
    phrase holds no negation, question, lookup or hypothetical (data/words.json "changes", docs/simulator.md); "delete
    nothing" asks for nothing. Quoted text counts for nothing; a clause ends at punctuation and at "and", "then",
    "just"..., except after a clause that is only a negation ("Don't, whatever happens, delete main.py")."""
    text = _QUOTED_SPAN.sub(lambda m: " " * len(m.group()), sentence.replace("\u2019", "'"))
    asked_anyway = _ASKED_ANYWAY.match(text.lstrip(" \t\"'“"))
    if text.rstrip().endswith(("?", "？")) and _QUESTION.match(text) and not asked_anyway or _QUESTION_END.search(text):
        return False
    if _NONE_AFTER.match(text, start):
        return False  # "delete nothing"
    parts = _BOUNDARY.split(text[:start])  # clause, boundary, clause, ..., the phrase's clause
    clause = _ASKED_ANYWAY.sub(" ", parts[-1])
    for before, sep in zip(
        reversed(parts[:-1:2]), reversed(parts[1::2]), strict=True
    ):  # "Don't, whatever happens, delete X"
        if sep.strip().isalpha() or not sep.strip():
            break  # "and", "then", "just": a new request
        if _BARE_NEGATION.fullmatch(before):
            return False
    return not _NOT_ASKED.search(clause)
