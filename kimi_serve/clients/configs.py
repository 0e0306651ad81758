"""One client's configuration for an :class:`~kimi_serve.clients.endpoint.Endpoint`: the file or snippet it needs
(text, pure), where it goes, and how that client turns thinking off. The key is always read from an environment
variable by NAME; no generated text ever holds a key.

Thinking off, per client (Kimi-K2.5's template kwarg is ``thinking``; SGLang 0.5.23 honours
``chat_template_kwargs: {"thinking": false}`` and ``reasoning_effort: "none"``, and Moonshot's own
``thinking: {"type": "disabled"}`` only with the Kimi patch set's ``moonshot_thinking_field``): the Python clients
pass ``chat_template_kwargs`` through ``extra_body``, the AI SDK and opencode through the provider's options (spread
into the request body by ``@ai-sdk/openai-compatible``), kimi-cli sends Moonshot's field (``--no-thinking``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kimi_serve.core.errors import ExitCode, KimiServeError

if TYPE_CHECKING:  # the command's --help lists CLIENTS without loading profiles
    from kimi_serve.clients.endpoint import Endpoint

PROVIDER_ID = "kimi-serve"  # the provider's name in opencode's and kimi-cli's configs
OFF = {"chat_template_kwargs": {"thinking": False}}
_ENVIRON = "os.environ"  # in the snippets' text (they read the key); kimi-serve itself reads no environment here
KIMI_CLI_KEY_ENV = "KIMI_API_KEY"  # kimi-cli's kimi provider takes its key from this variable over the file's


@dataclass(frozen=True)
class ClientConfig:
    client: str
    path: str  # where the text goes (a file name, or a description for a snippet)
    fmt: str  # json | toml | python | typescript
    text: str
    key_env: str  # the environment variable this client reads the key from (its NAME; the key is never written)
    thinking_off: str  # how to turn thinking off with this client
    thinking_off_honoured: bool | None  # None: unknown (no profile)
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "client": self.client,
            "file": {"path": self.path, "format": self.fmt, "text": self.text},
            "api_key_env": self.key_env,
            "thinking_off": {"how": self.thinking_off, "honoured": self.thinking_off_honoured},
            "notes": list(self.notes),
        }


def _escaped(value: str, *, what: str, scalar_only: bool) -> str:
    """``value`` as a double-quoted ASCII literal: printable ASCII as it is, ``"`` and ``\\`` escaped, every other
    character as ``\\uXXXX`` (BMP) or ``\\UXXXXXXXX`` (beyond it: one escape, never a UTF-16 surrogate pair, which
    Python reads as two lone surrogates and TOML refuses). ``scalar_only``: TOML, which has no escape for a lone
    surrogate (a USAGE error naming ``what``); Python keeps one as ``\\udXXX``, the same string read back."""
    out = []
    for ch in value:
        cp = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= cp < 0x7F:
            out.append(ch)
        elif 0xD800 <= cp <= 0xDFFF and scalar_only:
            raise KimiServeError(
                f"{what} {value!r} holds a lone surrogate (U+{cp:04X}): not a Unicode character, TOML cannot write it",
                hint=f"set {what} to valid Unicode text",
                exit_code=ExitCode.USAGE,
            )
        else:
            out.append(f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}")
    return '"' + "".join(out) + '"'


def _py_str(value: str) -> str:
    """A Python string literal of ``value`` (any Unicode; ``ast.literal_eval`` gives ``value`` back)."""
    return _escaped(value, what="", scalar_only=False)


def _toml_str(value: str, what: str = "model.served_name") -> str:
    """A TOML basic string of ``value`` (a value or a quoted key; ``tomllib`` reads ``value`` back)."""
    return _escaped(value, what=what, scalar_only=True)


def _key_expr_py(ep: Endpoint) -> str:
    if ep.key_required:
        return f"{_ENVIRON}[{_py_str(ep.key_env)}]"
    return f'{_ENVIRON}.get({_py_str(ep.key_env)}, "none")'


def _common_notes(ep: Endpoint) -> list[str]:
    key = (
        f"export {ep.key_env}=<the server's api-key> before starting the client (the key is never written here)"
        if ep.key_required
        else f"the server takes no API key; {ep.key_env} may be left unset (clients send a placeholder)"
    )
    notes = [key, *ep.notes]
    notes.append(
        f"limits: the server serves {ep.context_length} tokens of context (prompt + output); SGLang refuses "
        f"max_tokens above it (HTTP 400), so ask for at most {ep.max_output} output tokens"
    )
    if ep.preserve_thinking is not None:
        notes.append(
            f"{ep.title} keeps earlier turns' reasoning in the prompt only with preserve_thinking (this server: "
            f"{'on' if ep.preserve_thinking else 'off'}); send the assistant turns back with their reasoning_content"
            + (', and chat_template_kwargs {"preserve_thinking": true} per request to keep it' if ep.instant else "")
            + ("" if ep.instant else "; it is always on here")
        )
    if ep.reasoning_field:
        notes.append(f"reasoning comes back in `{ep.reasoning_field}`, the answer in `content`")
    else:
        notes.append("the profile has no reasoning parser: reasoning and </think> come back inside `content`")
    return notes


NO_INSTANT = "none: {title} only thinks (it has no instant mode)"
KIMI_CLI_OFF = (
    'kimi --no-thinking (or default_thinking = false): sends Moonshot\'s thinking: {{"type": "disabled"}}, {state}'
)
_SAMPLING_FORMS = {"kw": "{k}={v!r},", "dict": '"{k}": {v!r},', "js": "{js}: {v!r},"}


def _family_lines(ep: Endpoint, body: str, form: str) -> str:
    """The snippet for ``ep``'s family: its sampling (the family's only accepted values, or the profile's) where the
    thinking-off comment is, and that comment only where the model has an instant mode."""
    lines = body.split("\n")
    at = next(i for i, line in enumerate(lines) if "thinking off:" in line)
    pad = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    mark = "//" if form == "js" else "#"
    new = [
        pad
        + _SAMPLING_FORMS[form].format(k=k, v=v, js="topP" if k == "top_p" else k)
        + f"  {mark} {ep.title}: the sampling its vendor accepts"
        for k, v in ep.sampling
    ]
    if ep.instant:
        new.append(lines[at])
    else:
        new.append(f"{pad}{mark} thinking stays on: {ep.title} has no instant mode")
    return "\n".join([*lines[:at], *new, *lines[at + 1 :]])


def _off(ep: Endpoint, how: str) -> str:
    return how if ep.instant else NO_INSTANT.format(title=ep.title)


def opencode(ep: Endpoint) -> ClientConfig:
    limit = {"context": ep.context_length, "output": ep.max_output}
    thinking: dict[str, Any] = {"name": f"{ep.model} (thinking)", "tool_call": True, "reasoning": True, "limit": limit}
    if ep.sampling:
        thinking["options"] = dict(ep.sampling)
    instant = {
        "id": ep.model,
        "name": f"{ep.model} (instant: thinking off)",
        "tool_call": True,
        "reasoning": False,
        "limit": limit,
        "options": OFF,
    }
    doc = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": f"kimi-serve {ep.profile or ep.model}",
                "options": {"baseURL": ep.base_url, "apiKey": f"{{env:{ep.key_env}}}"},
                "models": {ep.model: thinking, **({f"{ep.model}-instant": instant} if ep.instant else {})},
            }
        },
        "model": f"{PROVIDER_ID}/{ep.model}",
    }
    return ClientConfig(
        "opencode",
        "opencode.json (the project root, or ~/.config/opencode/opencode.json)",
        "json",
        json.dumps(doc, indent=2) + "\n",
        ep.key_env,
        _off(ep, f"pick the model {PROVIDER_ID}/{ep.model}-instant (sends chat_template_kwargs thinking=false)"),
        ep.instant,
        tuple(_common_notes(ep)),
    )


def kimi_cli(ep: Endpoint) -> ClientConfig:
    text = "\n".join(
        [
            f"default_model = {_toml_str(ep.model)}",
            "default_thinking = true",
            "",
            f"[providers.{PROVIDER_ID}]",
            'type = "kimi"',
            f"base_url = {_toml_str(ep.base_url, 'the base URL')}",
            f'api_key = ""  # kimi-cli takes the key from ${KIMI_CLI_KEY_ENV} (it overrides this field)',
            "",
            f"[models.{_toml_str(ep.model)}]",
            f"provider = {_toml_str(PROVIDER_ID)}",
            f"model = {_toml_str(ep.model)}",
            # kimi-cli's own prompt estimate runs low (first request: 12,882 estimated, 28,373 counted): see the notes
            f"max_context_size = {ep.context_length - ep.max_output}  # the served {ep.context_length} less "
            f"{ep.max_output} of room: see the notes",
            'capabilities = ["thinking"]',
            "",
        ]
    )
    honoured = ep.moonshot_thinking
    if honoured is None:
        state = "honoured only by a server with the Kimi patch set's moonshot_thinking_field (unknown: no --profile)"
    elif honoured:
        state = (
            "honoured by the profile's patch sets (moonshot_thinking_field) once applied: "
            f"kimi-serve patches status --profile {ep.profile}"
        )
    else:
        state = (
            "IGNORED by this server (its patch set lacks moonshot_thinking_field, patches/sglang-0.5.23-kimi "
            "0004): thinking stays on"
        )
    notes = _common_notes(ep)
    notes[0] = (
        f'export {KIMI_CLI_KEY_ENV}="${ep.key_env}" (kimi-cli\'s kimi provider reads {KIMI_CLI_KEY_ENV})'
        if ep.key_required
        else "the server takes no API key; kimi-cli needs none"
    )
    notes.append(
        f"max_context_size is the served {ep.context_length} less the output budget {ep.max_output}: kimi-cli "
        "asks for max_completion_tokens = max_context_size - its own prompt estimate - 1024, a server's count of the "
        "prompt can be higher than that estimate, and prompt + max_completion_tokens over the served context is "
        "HTTP 400 (K2.5's published 262144 on every request); for a steady cap as well: export "
        f"KIMI_MODEL_MAX_COMPLETION_TOKENS={ep.max_output}"
    )
    if ep.sampling:
        notes.append(
            f"{ep.title}'s vendor accepts only {' '.join(f'{k}={v:g}' for k, v in ep.sampling)}: kimi-cli sends "
            "none of its own, so the server's defaults apply (--preferred-sampling-params, model.temperature/top_p)"
        )
    return ClientConfig(
        "kimi-cli",
        "~/.kimi/config.toml (or kimi --config-file FILE)",
        "toml",
        text,
        KIMI_CLI_KEY_ENV,
        _off(ep, KIMI_CLI_OFF.format(state=state)),
        honoured if ep.instant else False,
        tuple(notes),
    )


def _py(
    client: str, body: str, off: str, ep: Endpoint, form: str = "kw", fmt: str = "python", where: str = ""
) -> ClientConfig:
    body = _family_lines(ep, body, form)
    where = where or f"a Python snippet ({client})"
    return ClientConfig(client, where, fmt, body, ep.key_env, _off(ep, off), ep.instant, tuple(_common_notes(ep)))


def openai_sdk(ep: Endpoint) -> ClientConfig:
    body = f"""import os

from openai import OpenAI

client = OpenAI(base_url={_py_str(ep.base_url)}, api_key={_key_expr_py(ep)})
reply = client.chat.completions.create(
    model={_py_str(ep.model)},
    messages=[{{"role": "user", "content": "Say hello."}}],
    max_tokens={ep.max_output},  # prompt + max_tokens must fit the served context ({ep.context_length})
    # thinking off: extra_body={{"chat_template_kwargs": {{"thinking": False}}}},
)
message = reply.choices[0].message
print(getattr(message, "reasoning_content", None))  # Kimi's reasoning (an extra field on the message)
print(message.content)
"""
    off = 'extra_body={"chat_template_kwargs": {"thinking": False}} on the create() call'
    return _py("openai", body, off, ep)


def openai_agents(ep: Endpoint) -> ClientConfig:
    body = f"""import os

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # keep traces off OpenAI's servers
client = AsyncOpenAI(base_url={_py_str(ep.base_url)}, api_key={_key_expr_py(ep)})
agent = Agent(
    name="assistant",
    instructions="You are a helpful assistant.",
    model=OpenAIChatCompletionsModel(model={_py_str(ep.model)}, openai_client=client),
    model_settings=ModelSettings(
        max_tokens={ep.max_output},  # prompt + max_tokens must fit the served context ({ep.context_length})
        # thinking off: extra_body={{"chat_template_kwargs": {{"thinking": False}}}},
    ),
)
print(Runner.run_sync(agent, "Say hello.").final_output)
"""
    off = 'ModelSettings(extra_body={"chat_template_kwargs": {"thinking": False}})'
    return _py("openai-agents", body, off, ep)


def pydantic_ai(ep: Endpoint) -> ClientConfig:
    body = f"""import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

model = OpenAIChatModel(
    {_py_str(ep.model)},
    provider=OpenAIProvider(base_url={_py_str(ep.base_url)}, api_key={_key_expr_py(ep)}),
)
agent = Agent(
    model,
    model_settings={{
        "max_tokens": {ep.max_output},  # prompt + max_tokens must fit the served context ({ep.context_length})
        # thinking off: "extra_body": {{"chat_template_kwargs": {{"thinking": False}}}},
    }},
)
print(agent.run_sync("Say hello.").output)
"""
    off = 'model_settings={"extra_body": {"chat_template_kwargs": {"thinking": False}}}'
    return _py("pydantic-ai", body, off, ep, "dict")


def langchain(ep: Endpoint) -> ClientConfig:
    body = f"""import os

from langchain_openai import ChatOpenAI

llm = ChatOpenAI(
    model={_py_str(ep.model)},
    base_url={_py_str(ep.base_url)},
    api_key={_key_expr_py(ep)},
    max_tokens={ep.max_output},  # prompt + max_tokens must fit the served context ({ep.context_length})
    # thinking off: extra_body={{"chat_template_kwargs": {{"thinking": False}}}},
)
print(llm.invoke("Say hello.").content)  # ChatOpenAI does not surface reasoning_content
"""
    off = 'ChatOpenAI(..., extra_body={"chat_template_kwargs": {"thinking": False}})'
    return _py("langchain", body, off, ep)


def ai_sdk(ep: Endpoint) -> ClientConfig:
    key = f"process.env.{ep.key_env}" + ("" if ep.key_required else ' ?? "none"')
    # JSON's string literals are JavaScript's: non-ASCII as UTF-16 escapes (surrogate pairs beyond the BMP)
    body = f"""import {{ createOpenAICompatible }} from "@ai-sdk/openai-compatible";
import {{ generateText }} from "ai";

const kimi = createOpenAICompatible({{
  name: "kimi",
  baseURL: {json.dumps(ep.base_url)},
  apiKey: {key},
}});

const {{ text, reasoningText }} = await generateText({{
  model: kimi({json.dumps(ep.model)}),
  prompt: "Say hello.",
  maxOutputTokens: {ep.max_output}, // prompt + output must fit the served context ({ep.context_length})
  // thinking off: providerOptions: {{ kimi: {{ chat_template_kwargs: {{ thinking: false }} }} }},
}});
console.log(reasoningText); // read from reasoning_content
console.log(text);
"""
    off = "providerOptions: { kimi: { chat_template_kwargs: { thinking: false } } } (spread into the request body)"
    where = "a TypeScript module (ESM; npm ai + @ai-sdk/openai-compatible)"
    return _py("ai-sdk", body, off, ep, "js", "typescript", where)


CLIENTS: dict[str, Callable[[Endpoint], ClientConfig]] = {
    "opencode": opencode,
    "kimi-cli": kimi_cli,
    "openai": openai_sdk,
    "openai-agents": openai_agents,
    "pydantic-ai": pydantic_ai,
    "langchain": langchain,
    "ai-sdk": ai_sdk,
}
