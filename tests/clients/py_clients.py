"""Drive a real Python agent client through the client tier's two-turn tool loop and print what it did as JSON.

Run in the clients' own venv (scripts/build-client-env.sh), not kimi-serve's:

    python py_clients.py CLIENT MODES BASE_URL MODEL KEY

CLIENT: openai | openai-agents | pydantic-ai | langchain; MODES: stream, once or both (``once,stream``), one JSON
line each (one process per client: importing a client costs more than its loop). The loop: the user asks for the
weather in one city; the client runs the tool the server called (its real tool machinery: openai-agents' and
pydantic-ai's function tools, declared ``strict`` as those libraries do by default) and sends the result back on the
same history; the model answers; then a second user turn on that history asks for another city. Printed: the calls
the client executed (name, arguments), the answer it would show its user after each turn, and any exception it
raised (its type and first line), as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

TURNS = ("What is the weather in Paris right now? Use the tool.", "And in Tokyo?")
TOOL_NAME = "get_weather"
TOOL_DESCRIPTION = "Get the current weather for a city"
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city"}},
    "required": ["city"],
    "additionalProperties": False,
}


class Record:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answers: list[str] = []
        self.reasoning: list[str] = []

    def weather(self, city: str) -> str:
        self.calls.append({"name": TOOL_NAME, "arguments": {"city": city}})
        return f"{city}: sunny, 21 C"


def run_openai(base: str, model: str, key: str, stream: bool, rec: Record) -> None:
    import openai

    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=60)
    tools = [
        {"type": "function", "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": SCHEMA}}
    ]
    messages: list[dict[str, Any]] = []
    for turn in TURNS:
        messages.append({"role": "user", "content": turn})
        for _ in range(4):  # a client's step limit
            if stream:
                message, reasoning = _openai_stream(client, model, messages, tools)
            else:
                done = client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=512)
                msg = done.choices[0].message
                message = msg.model_dump(exclude_none=True)
                reasoning = getattr(msg, "reasoning_content", None) or (msg.model_extra or {}).get("reasoning_content")
            if reasoning:
                message["reasoning_content"] = reasoning  # replayed, as opencode and the AI SDK do
                rec.reasoning.append(reasoning)
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                rec.answers.append(message.get("content") or "")
                break
            for call in calls:
                args = json.loads(call["function"]["arguments"] or "{}")
                result = rec.weather(str(args.get("city", ""))) if call["function"]["name"] == TOOL_NAME else "no"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        else:
            rec.answers.append("")


def _openai_stream(client: Any, model: str, messages: list[Any], tools: list[Any]) -> tuple[dict[str, Any], str]:
    """The SDK's own stream accumulator (``chat.completions.stream``), as its users read a stream."""
    with client.chat.completions.stream(model=model, messages=messages, tools=tools, max_tokens=512) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    msg = final.choices[0].message
    message: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
    if msg.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in msg.tool_calls
        ]
    reasoning = getattr(msg, "reasoning_content", None) or (msg.model_extra or {}).get("reasoning_content") or ""
    return message, reasoning


def run_agents(base: str, model: str, key: str, stream: bool, rec: Record) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool(name_override=TOOL_NAME, description_override=TOOL_DESCRIPTION)
    def get_weather(city: str) -> str:
        return rec.weather(city)

    client = AsyncOpenAI(base_url=base, api_key=key, max_retries=0, timeout=60)
    agent = Agent(
        name="assistant",
        instructions="You are a helpful assistant.",
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        tools=[get_weather],
    )

    async def go() -> None:
        history: list[Any] = []
        for turn in TURNS:
            items = [*history, {"role": "user", "content": turn}]
            if stream:
                result = Runner.run_streamed(agent, items, max_turns=4)
                async for _ in result.stream_events():
                    pass
            else:
                result = await Runner.run(agent, items, max_turns=4)
            rec.answers.append(str(result.final_output or ""))
            history = result.to_input_list()

    asyncio.run(go())


def run_pydantic_ai(base: str, model: str, key: str, stream: bool, rec: Record) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    agent = Agent(
        OpenAIChatModel(model, provider=OpenAIProvider(base_url=base, api_key=key)),
        instructions="You are a helpful assistant.",
    )

    @agent.tool_plain(name=TOOL_NAME, description=TOOL_DESCRIPTION)
    def get_weather(city: str) -> str:
        return rec.weather(city)

    async def go() -> None:
        history: list[Any] = []
        for turn in TURNS:
            if stream:
                async with agent.run_stream(turn, message_history=history) as result:
                    text = await result.get_output()
                    history = result.all_messages()
            else:
                done = await agent.run(turn, message_history=history)
                text, history = done.output, done.all_messages()
            rec.answers.append(str(text or ""))

    asyncio.run(go())


def run_langchain(base: str, model: str, key: str, stream: bool, rec: Record) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool(TOOL_NAME, description=TOOL_DESCRIPTION)
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return rec.weather(city)

    llm = ChatOpenAI(base_url=base, api_key=key, model=model, max_retries=0, timeout=60, max_tokens=512)
    bound = llm.bind_tools([get_weather])
    messages: list[Any] = []
    for turn in TURNS:
        messages.append(HumanMessage(turn))
        for _ in range(4):
            if stream:
                msg = None
                for chunk in bound.stream(messages):
                    msg = chunk if msg is None else msg + chunk
                assert msg is not None
            else:
                msg = bound.invoke(messages)
            messages.append(msg)
            if not msg.tool_calls:
                rec.answers.append(msg.content if isinstance(msg.content, str) else json.dumps(msg.content))
                break
            for call in msg.tool_calls:
                messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
        else:
            rec.answers.append("")


CLIENTS = {
    "openai": run_openai,
    "openai-agents": run_agents,
    "pydantic-ai": run_pydantic_ai,
    "langchain": run_langchain,
}


def main() -> int:
    client, modes, base, model, key = sys.argv[1:6]
    for mode in modes.split(","):
        rec = Record()
        error = None
        try:
            CLIENTS[client](base, model, key, mode == "stream", rec)
        except Exception as exc:  # noqa: BLE001 - what the client raised is the finding: its type and first line
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        doc = {"client": client, "mode": mode, "calls": rec.calls, "answers": rec.answers, "error": error}
        print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
