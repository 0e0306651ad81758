"""Constrained generation for the simulator through SGLang's OWN grammar backend (the profile's ``--grammar-backend``),
obtained and keyed as 0.5.23's scheduler does it (``create_grammar_backend``, ``GrammarManager``), with SGLang's errors.

Decoding works like a deterministic sampler under SGLang's vocab mask: the scripted model's intended token while the
grammar allows it; from the first token it rejects, a stop token, else the grammar's forced continuation, else the
first allowed of a short list, else the smallest allowed non-whitespace id, back in step with the intended text when
a chosen token is found further on in it (docs/simulator.md, "Constrained generation"). Runs inside the SGLang venv.
"""

from __future__ import annotations

import json
import threading
import types
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from kimi_serve.simulator import model as scripted
from kimi_serve.simulator.prompt import CALL
from kimi_serve.simulator.schema_strings import format_example

_CONSTRAINTS = ("json_schema", "regex", "ebnf", "structural_tag")
# The deterministic choice once the grammar has rejected the intended token: close what is open, move on to the next
# item; in strings, the characters that complete common formats (e-mails, dates, times, URIs, patterns).
_PREFERRED = ('"', "@", "a", ".", "0", "-", ":")  # inside a JSON string: close it, else what formats need
_PREFERRED_OUTSIDE = ("}", "]", '"', ",", "0", "-")  # outside one: close the object/array, else the next item
_REPEAT_LIMIT = 16  # the same fallback token this many times in a row: try the next candidate (no endless "!!!!")


def has_constraint(params: Any) -> bool:
    return any(getattr(params, name, None) is not None for name in _CONSTRAINTS)


@dataclass
class _Req:
    """The slice of ``schedule_batch.Req`` that ``GrammarManager.process_req_with_grammar`` reads and writes."""

    sampling_params: Any
    origin_input_ids: list[int]
    require_reasoning: bool
    grammar: Any = None
    grammar_key: Any = None
    abort: dict[str, Any] | None = None

    def set_finish_with_abort(
        self, error_msg: str, status_code: HTTPStatus = HTTPStatus.BAD_REQUEST, err_type: str = "BadRequestError"
    ) -> None:
        from sglang.srt.managers.schedule_batch import FINISH_ABORT

        self.grammar = None
        self.abort = FINISH_ABORT(error_msg, status_code, err_type).to_json()


class Constrainer:
    """One grammar backend per server (as one per scheduler), built once: xgrammar's TokenizerInfo for a 163840-id
    vocabulary takes 1.5 s (idle 2-core machine) to 8 s (loaded), so :meth:`prepare` runs it at startup, beside the
    rest of it, and every request reuses it (compiled grammars are cached by SGLang's backend)."""

    def __init__(self, model_config: Any, tokenizer: Any, server_args: Any) -> None:
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.server_args = server_args
        self.vocab_size = int(model_config.vocab_size)
        self._lock = threading.Lock()
        self._manager: Any = None
        # <|im_end|> (what the scripted model ends a turn with) first, then the model's EOS ids (xgrammar's stop
        # tokens: TokenizerInfo gets model_eos_token_ids)
        im_end = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.stop_order = [im_end, *sorted(set(model_config.hf_eos_token_id or ()) - {im_end})]
        self.stop_ids = frozenset(self.stop_order)
        self._prefer: list[int] = []
        self._prefer_outside: list[int] = []
        self._blank: dict[int, bool] = {}

    def prepare(self) -> Any:
        """SGLang's ``GrammarManager`` state for this server: its backend (``None`` for ``--grammar-backend none``)."""
        with self._lock:
            if self._manager is None:
                self._manager = self._build_manager()
            return self._manager

    def _build_manager(self) -> Any:
        from sglang.srt.constrained.base_grammar_backend import create_grammar_backend
        from sglang.srt.constrained.grammar_manager import GrammarManager
        from sglang.srt.parser.reasoning_parser import ReasoningParser
        from sglang.srt.runtime_context import get_serving

        think_end_ids = None
        if get_serving().reasoning_parser:  # what the scheduler sets on model_config at startup
            parser = ReasoningParser(
                model_type=get_serving().reasoning_parser, stream_reasoning=False, tokenizer=self.tokenizer
            )
            think_end_ids = parser.detector.get_think_end_token_ids(self.tokenizer) or None
            self.model_config.think_end_ids = think_end_ids
        backend = None
        if not get_serving().skip_tokenizer_init:
            backend = create_grammar_backend(
                self.server_args,
                self.tokenizer,
                self.vocab_size,
                self.model_config.hf_eos_token_id,
                think_end_ids=think_end_ids,
            )
        manager = GrammarManager.__new__(GrammarManager)  # its per-request methods, without a scheduler's groups
        manager.grammar_backend = backend
        manager._enable_strict_thinking = backend.enable_strict_thinking if backend is not None else False
        manager.scheduler = types.SimpleNamespace(model_config=self.model_config)
        manager.grammar_queue = []
        self._prefer = self._single_tokens(_PREFERRED)
        self._prefer_outside = self._single_tokens(_PREFERRED_OUTSIDE)
        return manager

    @staticmethod
    def strict_thinking() -> bool:
        """``--enable-strict-thinking``: SGLang then gives even unconstrained requests a reasoning filter grammar."""
        from sglang.srt.runtime_context import get_serving

        return bool(getattr(get_serving(), "enable_strict_thinking", False))

    def grammar(self, params: Any, input_ids: list[int], require_reasoning: bool) -> tuple[Any, dict[str, Any] | None]:
        """The request's grammar object (or ``None``) and SGLang's abort finish reason when it has none to give."""
        manager = self.prepare()
        req = _Req(params, list(input_ids), require_reasoning)
        queued = manager.process_req_with_grammar(req)
        manager.grammar_queue.clear()
        if queued:  # compiled now, as get_ready_grammar_requests collects it
            from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

            try:
                req.grammar = req.grammar.result()
            except Exception as exc:  # noqa: BLE001 - SGLang turns any compile failure into an invalid grammar
                req.grammar = InvalidGrammarObject(f"Grammar compilation failed: {exc}")
            manager.grammar_backend.set_cache(req.grammar_key, req.grammar.copy())
            manager._apply_request_reasoning_config(req)
            if isinstance(req.grammar, InvalidGrammarObject):
                req.set_finish_with_abort(
                    f"Failed to compile {req.grammar_key[0]} grammar: {req.grammar.error_message}"
                )
        return req.grammar, req.abort

    def decode(self, grammar: Any, intended: list[int], limit: int) -> tuple[list[int], int | None]:
        """The token ids the grammar lets through (stop token excluded) and the matched stop id (``None``: cut by
        ``limit``)."""
        mask = grammar.allocate_vocab_mask(self.vocab_size, 1, "cpu")
        out: list[int] = []
        following, at = True, 0  # at: the next intended token
        in_string = escaped = False  # whether the output so far is inside a JSON string (unescaped quotes counted)
        active = getattr(grammar, "_grammar_active", None)  # ReasonerGrammarObject: False while reasoning
        while len(out) < limit:
            if mask is not None:
                mask.fill_(-1)  # all allowed: the reasoning phase leaves the row as it is
                grammar.fill_vocab_mask(mask, 0)
            row = mask[0] if mask is not None else None
            want = intended[at] if at < len(intended) else self.stop_order[0]
            if following and self._allowed(row, want):
                at += 1
            else:
                following = False
                tail = out[-_REPEAT_LIMIT:]
                avoid = tail[0] if len(tail) == _REPEAT_LIMIT and len(set(tail)) == 1 else None
                want = self._choose(grammar, row, avoid, in_string)
                if want in intended[at:]:  # back in step with the intended text (e.g. the call after a preface)
                    at = intended.index(want, at) + 1
                    following = True
            for ch in self.tokenizer.decode([want], skip_special_tokens=False) if active is None or active() else "":
                if escaped:
                    escaped = False
                elif ch == "\\" and in_string:
                    escaped = True
                elif ch == '"':
                    in_string = not in_string
            grammar.accept_token(want)
            if want in self.stop_ids:
                return out, want
            out.append(want)
            if grammar.is_terminated():
                return out[:-1], want
        return out, None

    def _single_tokens(self, texts: tuple[str, ...]) -> list[int]:
        ids = [self.tokenizer.encode(text, add_special_tokens=False) for text in texts]
        return [int(i[0]) for i in ids if len(i) == 1]

    @staticmethod
    def _allowed(row: Any, token: int) -> bool:
        return row is None or bool((int(row[token >> 5]) >> (token & 31)) & 1)

    def _choose(self, grammar: Any, row: Any, avoid: int | None = None, in_string: bool = True) -> int:
        for stop in self.stop_order:
            if self._allowed(row, stop):
                return int(stop)
        try:
            forced = grammar.try_jump_forward(self.tokenizer)
            text = grammar.jump_forward_str_state(forced)[0] if forced else ""
        except UnicodeDecodeError:  # the forced bytes end inside a multi-byte character (an emoji key): no jump
            forced, text = None, ""
        if forced:
            ids = self.tokenizer.encode(text, add_special_tokens=False) if text else []
            if ids and self._allowed(row, ids[0]):
                return int(ids[0])
        for token in self._prefer if in_string else self._prefer_outside:
            if token != avoid and self._allowed(row, token):
                return token
        allowed = self._allowed_ids(row)
        for token in allowed:
            if token != avoid and not self._is_blank(token):
                return token
        if not allowed:
            raise ValueError("the grammar allows no token")  # SGLang would sample garbage; say so instead
        return allowed[0]

    def _allowed_ids(self, row: Any) -> list[int]:
        import torch

        bits = (row.unsqueeze(1) >> torch.arange(32, dtype=row.dtype)) & 1
        return [int(i) for i in torch.nonzero(bits.flatten()[: self.vocab_size]).flatten().tolist()]

    def _is_blank(self, token: int) -> bool:
        if token not in self._blank:
            self._blank[token] = not self.tokenizer.decode([token], skip_special_tokens=False).strip()
        return self._blank[token]


def intended_text(text: str, params: Any) -> str:
    """What the scripted model means to write under a JSON-schema constraint: the JSON, not prose. A tool section
    becomes SGLang's forced-call array (``[{"name", "parameters"}]``, what required/named calls look like without a
    structural-tag parser); an answer becomes an instance sketched from the schema with the answer in its strings.
    The grammar still has the last word on every token."""
    if params.json_schema is None:
        return text
    head, sep, answer = text.rpartition(scripted.THINK_END)
    prefix = head + sep
    try:
        schema = json.loads(params.json_schema)
    except ValueError:
        return text
    calls = [(ident.split(".", 1)[-1].rsplit(":", 1)[0], args) for ident, args in CALL.findall(answer)]
    if calls and isinstance(schema, dict) and schema.get("type") == "array":
        body = ", ".join(f'{{"name": {json.dumps(n)}, "parameters": {a}}}' for n, a in calls)
        return f"{prefix}[{body}]"
    if _is_instance(answer, schema):  # the scripted model already answered in JSON (asked to): keep it
        return text
    return prefix + json.dumps(sketch(schema, answer.strip()), ensure_ascii=False)


def _is_instance(answer: str, schema: Any) -> bool:
    import jsonschema

    try:
        return bool(jsonschema.Draft202012Validator(schema).is_valid(json.loads(answer)))
    except (ValueError, TypeError, jsonschema.exceptions.SchemaError, RecursionError):
        return False


_SKETCH_ITEMS = 64  # items and characters a sketch writes at most (the grammar asks for the rest, token by token)
_SKETCH_CHARS = 4096
_SKETCH_NODES = 2000


def sketch(schema: Any, answer: str, depth: int = 0, nodes: list[int] | None = None) -> Any:
    """A plausible instance of ``schema`` (best effort: the grammar corrects what this gets wrong), bounded in
    nodes, items and characters whatever the schema asks for."""
    nodes = [_SKETCH_NODES] if nodes is None else nodes
    nodes[0] -= 1
    if not isinstance(schema, dict) or depth > 8 or nodes[0] < 0:
        return answer
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return sketch(schema[key][0], answer, depth + 1, nodes)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        keys = list(schema.get("required") or props)
        if not keys and kind == "object" and not props:
            return {"answer": answer}
        return {k: sketch(props.get(k, {}) if isinstance(props, dict) else {}, answer, depth + 1, nodes) for k in keys}
    if kind == "array":
        count = min(_number(schema.get("minItems"), 1), _SKETCH_ITEMS)
        return [sketch(schema.get("items", {}), answer, depth + 1, nodes) for _ in range(max(1, count))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum")) or 0
        return int(low) + (1 if "exclusiveMinimum" in schema else 0) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    made = format_example(str(schema.get("format", "")))
    if made is not None:
        return made
    text = answer[: schema["maxLength"]] if isinstance(schema.get("maxLength"), int) else answer
    return text.ljust(min(_number(schema.get("minLength"), 0), _SKETCH_CHARS), ".")


def _number(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default
