"""The pure parts of the simulator's constraint and stop handling (no sglang needed): what the scripted model intends
under a JSON-schema constraint, and where a request's own stop strings / stop ids end the output."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jsonschema

from kimi_serve.simulator.constrain import intended_text, sketch
from kimi_serve.simulator.model import ARG_BEGIN, CALL_BEGIN, CALL_END, SECTION_BEGIN, SECTION_END, THINK_END
from kimi_serve.simulator.stops import find_stop, holds_back


class CharTokenizer:
    """A STAND-IN tokenizer for these tests: one token per character (id = code point)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids)


def _params(**kw: object) -> SimpleNamespace:
    base = {"json_schema": None, "stop_strs": [], "stop_token_ids": None, "ignore_eos": False, "no_stop_trim": False}
    return SimpleNamespace(**{**base, **kw})


def test_sketch_is_valid_for_plain_schemas() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "n": {"type": "integer", "minimum": 5},
            "ok": {"type": "boolean"},
            "kind": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "maybe": {"type": ["null", "number"]},
            "c": {"const": 3},
            "any": {"anyOf": [{"type": "string"}]},
        },
        "required": ["name", "n", "ok", "kind", "tags", "maybe", "c", "any"],
    }
    value = sketch(schema, "Paris")
    jsonschema.validate(value, schema)
    assert value["name"] == "Paris" and value["n"] == 5
    assert sketch({"type": "object"}, "hi") == {"answer": "hi"}  # json_object: the answer as an object
    assert sketch({"type": "string", "format": "email"}, "hi") == "user@example.com"
    assert len(sketch({"type": "string", "minLength": 5}, "hi")) == 5
    assert sketch({"type": "string", "maxLength": 2}, "Paris") == "Pa"


def test_intended_text_keeps_the_reasoning_and_writes_json() -> None:
    params = _params(
        json_schema=json.dumps({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})
    )
    text = intended_text(f"thinking{THINK_END}The answer.", params)
    assert text.startswith(f"thinking{THINK_END}") and json.loads(text.split(THINK_END)[1]) == {"a": "The answer."}
    assert intended_text("prose", _params()) == "prose"  # no JSON schema: the scripted text as it is


def test_a_tool_section_under_the_forced_call_schema_becomes_the_call_array() -> None:
    section = f'{SECTION_BEGIN}{CALL_BEGIN}functions.get_weather:0{ARG_BEGIN}{{"city": "Paris"}}{CALL_END}{SECTION_END}'
    params = _params(json_schema=json.dumps({"type": "array", "minItems": 1, "items": {"type": "object"}}))
    text = intended_text(f"r{THINK_END}{section}", params)
    assert json.loads(text.split(THINK_END)[1]) == [{"name": "get_weather", "parameters": {"city": "Paris"}}]


def test_stop_string_cuts_before_the_string_or_through_it() -> None:
    tok, ids = CharTokenizer(), [ord(c) for c in "Here is a direct answer"]
    stopped = find_stop(tok, ids, _params(stop_strs=["direct", "answer"]), frozenset())
    assert stopped is not None and stopped.matched == "direct" and stopped.text == "Here is a "
    assert tok.decode(stopped.ids) == "Here is a direct"  # the tokens up to the stop string count as generated
    kept = find_stop(tok, ids, _params(stop_strs=["direct"], no_stop_trim=True), frozenset())
    assert kept is not None and kept.text == "Here is a direct"
    assert find_stop(tok, ids, _params(stop_strs=["nowhere"]), frozenset()) is None


def test_stop_token_ids_end_the_output_unless_ignore_eos() -> None:
    tok, ids = CharTokenizer(), [ord(c) for c in "abcabc"]
    stopped = find_stop(tok, ids, _params(stop_token_ids={ord("c")}), frozenset())
    assert stopped is not None and stopped.ids == [ord("a"), ord("b")] and stopped.matched == ord("c")
    assert find_stop(tok, ids, _params(stop_token_ids={ord("c")}, ignore_eos=True), frozenset()) is None


def test_stream_holds_back_a_possible_stop_prefix() -> None:
    params = _params(stop_strs=["direct"])
    assert holds_back("Here is a dir", params) and holds_back("a direct", params)
    assert not holds_back("Here is a", params) and not holds_back("x", _params())
