"""Everyday agent tasks: the one call an agent's request needs, and nothing it did not ask for.

Coding agents offer 10-15 tools whose descriptions run to pages, so word matching (decision.py) would pick anything.
Here the request decides, from a small vocabulary (data/tasks.json): each tool gets a **role** from the words of its
name (else its parameters); the request is cut at sentence ends and request phrases, each piece asking for one action
on what it names (a file, directory, URL, quoted string, command, symbol). :func:`plan` gives one call per thing asked
for, :func:`safe` is what decision.py may choose from otherwise (nothing that changes or runs unless asked for in the
affirmative), :func:`beside` what may serve the rest of a planned request (docs/simulator.md, "The scripted model").
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, NamedTuple

from kimi_serve.simulator import intent
from kimi_serve.simulator.schema_strings import FILE_LIKE, plain

DESTRUCTIVE = frozenset({"write", "edit", "delete", "run"})
UNASKED_NEVER = frozenset({"delegate", "todo", "question"})
_SENTENCE = re.compile(r"(?<=[.?!;。？！；])\s+|\n+|[。？！；]")
_QUOTE = re.compile(r"`([^`]+)`|\"([^\"]+)\"|(?<!\w)'([^']+)'(?!\w)|“([^”]+)”")
_URL = re.compile(r"https?://[^\s\"'`<>)]+")
_BARE_FILES = re.compile(
    r"(?<![\w./-])((?i:readme)|Makefile|Dockerfile|LICENSE|CHANGELOG|Procfile|Gemfile|Rakefile|Justfile)(?![\w./-])"
)
_DIR = re.compile(
    r"\b(?:in|under|inside|of)\s+(?:the\s+)?(?:`([\w./-]+)`|([\w.-]+/[\w./-]*|[\w-]+)\s+(?:directory|folder|dir)\b"
    r"|(?:directory|folder|dir)\s+`?([\w./-]+)`?|([\w-]+(?:/[\w.-]+)*/))",
    re.IGNORECASE,
)
_LISTED = re.compile(r"\b(?:files?|director(?:y|ies)|folders?|contents|tree)\b|文件|目录", re.IGNORECASE)
_SYMBOL = re.compile(r"\b([A-Za-z_]\w*(?:_\w+|[a-z][A-Z]\w*)|\w+\(\))")
_AFTER = re.compile(
    r"\b(?:function|class|method|symbol|variable|constant|definition\s+of|usages?\s+of|references?\s+to|"
    r"occurrences?\s+of|for|named|called|word|string|text)\s+([A-Za-z_][\w.]*)"
)
_CONTENT = re.compile(r"\b(?:with|containing|saying|that\s+says)\s+(?:the\s+)?(?:content|text)?\s*:?\s*(.+)$|:\s*(.+)$")
_JOINED = re.compile(
    r"(?:\band|\bthen|\balso|\bplus|\bbut|,|并且|然后|再)(?:\s+(?:just|first|only|instead|please|now))*\s*$"
    r"|\b(?:just|first|instead)\s*$",
    re.IGNORECASE,
)
_NOT_TARGETS = frozenset({"the", "a", "an", "it", "this", "that", "all", "where", "in", "me", "file", "files", "code"})
Call = tuple[dict[str, Any], dict[str, Any]]  # a tool and the argument values the request names
CallPlan = tuple[list[Call], str]


def vocabulary() -> dict[str, Any]:
    return intent.words("tasks.json")


@lru_cache(maxsize=16)
def _phrases(action: str) -> re.Pattern[str]:
    return re.compile(intent.phrases(vocabulary()["requests"][action]), re.IGNORECASE)


def role(fn: dict[str, Any]) -> str | None:
    """What the tool does, from the words of its name (then its parameters): see the module docstring."""
    name = str(fn.get("name", ""))
    words = {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)} | {plain(name)}
    for kind, names in vocabulary()["tool_roles"].items():
        if words & set(names):
            return str(kind)
    keys = {plain(k) for k in intent.props(fn)}
    if words & {"search", "find"} and keys & {"pattern", "regex"}:
        return "search"
    if keys & set(vocabulary()["params"]["command"]):
        return "run"
    return None


def key_for(fn: dict[str, Any], kind: str, skip: tuple[str, ...] = ()) -> str | None:
    """The tool's parameter that takes a value of ``kind`` (path, dir, pattern, command, url), by its normalised name
    in the order the vocabulary lists them."""
    props = {plain(k): k for k in intent.props(fn) if isinstance(k, str) and k not in skip}
    return next((props[n] for n in vocabulary()["params"][kind] if n in props), None)


def _files(text: str) -> list[str]:
    quoted = [q for q in _quoted(text) if FILE_LIKE.fullmatch(q) or ("/" in q and " " not in q and "://" not in q)]
    found = [(m.start(), m.group(1)) for m in FILE_LIKE.finditer(_URL.sub(" ", text))]
    found += [(m.start(), m.group(1)) for m in _BARE_FILES.finditer(text)]
    found = [(pos, "README.md" if f.lower() == "readme" else f) for pos, f in found]  # the usual readme
    return list(dict.fromkeys(quoted + [f for _, f in sorted(found)]))


def _quoted(text: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _QUOTE.finditer(text)]


def command(text: str) -> str | None:
    """The command a request names: backticked or quoted, or bare when it starts with a known program."""
    for q in _quoted(text):
        if q.split()[0] in vocabulary()["commands"] or " " in q:
            return q
    m = re.search(r"(?:^|\s)(?:the\s+)?(?:shell\s+)?(?:command\s+)?([a-z][\w.-]*(?:\s+[^\s,;]+)*)", text)
    if m and m.group(1).split()[0] in vocabulary()["commands"]:
        return re.split(r"\s+(?:and|then|to|so|for\s+me)\b|[,;]", m.group(1))[0].rstrip(".?!")
    return None


class Piece(NamedTuple):
    action: str  # read, list, search, run, change, other
    text: str  # the piece (the first one with its sentence's start)
    rest: str  # the text after the request phrase
    asked: bool  # the phrase is asked for in the affirmative (intent.asks_for): "don't delete X" is not


def _pieces(prompt: str) -> list[Piece]:
    """The request cut into pieces: each request phrase owns the text up to the next one (the first one the
    sentence's start as well: "In config.py, replace ..."); a later phrase starts a piece of its own after "and",
    "then", "but", "just", "first" or a comma."""
    out: list[Piece] = []
    for sentence in _SENTENCE.split(prompt):
        marks = sorted(
            (m.start(), -len(m.group()), action, m.end())
            for action in ("read", "list", "search", "run", "change", "other")
            for m in _phrases(action).finditer(sentence)
        )
        kept: list[tuple[int, str, int]] = []
        for start, _, action, end in marks:
            if not kept or (start >= kept[-1][2] and _JOINED.search(sentence[:start])):
                kept.append((start, action, end))
        for i, (start, action, end) in enumerate(kept):
            stop = kept[i + 1][0] if i + 1 < len(kept) else len(sentence)
            text = sentence[0 if i == 0 else start : stop]
            out.append(Piece(action, text, sentence[end:stop], intent.asks_for(sentence, start)))
    return out


def asks_change(prompt: str, actions: tuple[str, ...] = ("change",)) -> bool:
    """Some phrase of ``actions`` in the request is asked for in the affirmative ("delete X", not "don't delete X",
    "should I delete X?" or "find where we delete X")."""
    return any(
        intent.asks_for(sentence, m.start())
        for sentence in _SENTENCE.split(prompt)
        for action in actions
        for m in _phrases(action).finditer(sentence)
    )


def _by_role(functions: list[dict[str, Any]], wanted: str) -> dict[str, Any] | None:
    return next((fn for fn in functions if role(fn) == wanted), None)


def _call(fn: dict[str, Any] | None, **values: tuple[str, str | None]) -> list[Call]:
    """One call of ``fn`` with each value in the parameter of its kind (values: name -> (kind, value))."""
    if fn is None:
        return []
    fixed: dict[str, Any] = {}
    for kind, value in values.values():
        key = key_for(fn, kind, tuple(fixed))
        if key is not None and value is not None:
            fixed[key] = value
    return [(fn, fixed)]


def _glob(text: str) -> str:
    """The pattern a listing asks for: a quoted glob, the files of a language named ("the Python files"), else *."""
    globs = [q for q in _quoted(text) if "*" in q or "?" in q]
    languages: dict[str, str] = vocabulary()["languages"]
    named = [f"**/*.{ext}" for word, ext in languages.items() if re.search(rf"\b{word}\s+files\b", text, re.I)]
    return (globs or named or ["*"])[0]


def _directory(text: str) -> str | None:
    m = _DIR.search(text)
    found = next((g for g in m.groups() if g), None) if m else None
    return None if found is None or found.lower() in _NOT_TARGETS | {"this", "current", "project"} else found


def _search_target(rest: str) -> str | None:
    quoted = _quoted(rest)
    if quoted:
        return quoted[0]
    m = _SYMBOL.search(rest) or _AFTER.search(rest)
    if m and m.group(1).lower() not in _NOT_TARGETS:
        return m.group(1).removesuffix("()")
    return None


def _piece_calls(functions: list[dict[str, Any]], piece: Piece, agent: bool) -> list[Call] | None:
    """The calls one piece asks for; None when the piece asks for something this vocabulary cannot serve (a change
    or a command not asked for in the affirmative among them)."""
    action, text, rest = piece.action, piece.text, piece.rest
    if action in ("run", "change") and not piece.asked:
        return None
    files, urls = _files(text), _URL.findall(text)
    if urls and action in ("read", "search", "run"):
        return [c for u in urls for c in _call(_by_role(functions, "fetch"), url=("url", u.rstrip(".,")))]
    if action == "read" and files:
        return [c for f in files for c in _call(_by_role(functions, "read"), path=("path", f))]
    if _LISTED.search(text) and action in ("read", "list") or action == "list" and len(text.split()) <= 2:
        lister = _by_role(functions, "list")
        pattern = _glob(text) if lister is not None and key_for(lister, "pattern") else None
        return _call(lister, pattern=("pattern", pattern), dir=("dir", _directory(text)))
    if action == "search":
        target = _search_target(rest)
        if target and FILE_LIKE.fullmatch(target) or (target or "").startswith("*"):
            return _call(_by_role(functions, "list"), pattern=("pattern", f"**/{target}"))
        return _call(_by_role(functions, "search"), pattern=("pattern", target)) if target else None
    if action == "run":
        named = command(rest)
        return _call(_by_role(functions, "run"), command=("command", named)) if named else None
    if action == "change" and agent and files:  # the file after the verb ("Don't touch a.py, just delete b.py")
        return _change(functions, text, rest, (_files(rest) or files)[0])
    return None


def _change(functions: list[dict[str, Any]], text: str, rest: str, file: str) -> list[Call]:
    verb = (text[: len(text) - len(rest)].split() or [""])[-1].lower()
    verb = next((v for v in ("写", "创建", "保存", "删除") if verb.endswith(v)), verb)  # "请删除": no space before it
    quoted = [q for q in _quoted(text) if q != file]
    if verb in ("write", "create", "save", "overwrite", "写", "创建", "保存"):
        m = _CONTENT.search(text[text.find(file) + len(file) :])
        content = quoted[0] if quoted else next((g for g in m.groups() if g), "").strip() if m else ""
        return _call(_by_role(functions, "write"), path=("path", file), content=("content", content))
    if verb in ("delete", "remove", "rm", "删除"):
        remover = _by_role(functions, "delete")
        if remover is None:  # no tool of its own: the command that does it, asked for
            return _call(_by_role(functions, "run"), command=("command", f"rm {file}"))
        return _call(remover, path=("path", file))
    editor = _by_role(functions, "edit")
    if len(quoted) >= 2 and editor is not None:
        keys = [k for k in intent.props(editor) if plain(k) not in vocabulary()["params"]["path"]]
        olds = [k for k in keys if re.search(r"old|search|find|target", k, re.I)]
        news = [k for k in keys if re.search(r"new|replace", k, re.I)]
        if olds and news:
            path = key_for(editor, "path")
            return [(editor, {**({path: file} if path else {}), olds[0]: quoted[0], news[0]: quoted[1]})]
    return _call(_by_role(functions, "read"), path=("path", file))  # a change it cannot spell out: read first


def plan(functions: list[dict[str, Any]], prompt: str) -> CallPlan | None:
    """The calls an everyday agent request asks for, as (function, named argument values) in the order asked, and
    the rest of the request ("... and get the weather in Tokyo": for the other tools, decision.py); no calls for a
    greeting; None when the request is none of these (decision.py decides, among :func:`safe` tools)."""
    roles = [role(fn) for fn in functions]
    if not any(roles):
        return None
    agent = bool({"run", "edit", "delegate"} & set(roles))
    calls: list[Call] = []
    rest: list[str] = []
    for piece in _pieces(prompt):
        if piece.action == "change" and piece.asked and not agent:
            return None  # a change among a few plain tools: decision.py's matching serves it
        found = _piece_calls(functions, piece, agent) if piece.action != "other" else None
        unasked = piece.action in ("run", "change") and not piece.asked  # "don't delete X": for no tool at all
        rest += [] if found or unasked else [piece.text]
        for fn, fixed in found or []:
            if (fn["name"], fixed) not in [(f["name"], x) for f, x in calls]:
                calls.append((fn, fixed))
    reader, files = _by_role(functions, "read"), _files(prompt)
    if not calls and reader is not None and files and not asks_change(prompt):
        calls = [c for f in files for c in _call(reader, path=("path", f))]  # a request about a file: read it
    if calls:
        return calls, " ".join(rest)
    return ([], "") if greeting(prompt) else None


def greeting(prompt: str) -> bool:
    text = re.sub(r"[^\w\s']+", " ", prompt.lower()).strip()
    return any(re.match(rf"{re.escape(g)}(?!\w)", text) for g in vocabulary()["greetings"])


def safe(functions: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The tools a request may get when no plan fits: nothing that writes, edits, deletes or runs unless the request
    asks for a change in the affirmative (or names a command and asks to run it, for a tool that runs one), no
    sub-agent or to-do tool unless named."""
    lowered = prompt.lower()
    change = asks_change(prompt)
    runs = asks_change(prompt, ("run",)) and command(prompt) is not None
    barred = set(UNASKED_NEVER) | ({"run"} if not runs else set()) | (DESTRUCTIVE - {"run"} if not change else set())
    return [fn for fn in functions if role(fn) not in barred or named(str(fn.get("name", "")), lowered)]


def beside(functions: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The tools that may serve what a plan leaves of the request: those of no role the planner knows, and a
    question, sub-agent or to-do tool only when the request names it."""
    lowered = prompt.lower()
    return [
        fn
        for fn in functions
        if role(fn) is None or role(fn) in UNASKED_NEVER and named(str(fn.get("name", "")), lowered)
    ]


def named(name: str, lowered: str) -> bool:
    """The request names the tool: a compound name (``run_command``, ``TodoWrite``) anywhere; a plain word (``task``,
    ``edit``) only as a tool: backticked, "the task tool", "use task"."""
    word = re.escape(name.lower())
    if not name.isalpha() or (name[1:] != name[1:].lower()):
        return bool(re.search(rf"(?<![\w-]){word}(?![\w-])", lowered))
    return bool(
        re.search(
            rf"`{word}`|\b{word}\s+(?:tool|function|agent)\b|\b(?:use|call|invoke)\s+(?:the\s+)?{word}\b", lowered
        )
    )
