// Drive the Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`) through the client tier's two-turn tool loop and
// print what it did as JSON (tests/clients/py_clients.py does the same for the Python clients).
//   NODE_PATH=CLIENTS/node_modules node ai_sdk.mjs MODE BASE_URL MODEL KEY       MODE: stream | once
// The SDK runs the tool itself (stopWhen: stepCountIs(5)) and replays the assistant's reasoning and tool calls on the
// same history for the second turn, as opencode (built on it) does.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.CLIENTS_NODE_MODULES, "x.js"));
const { generateText, streamText, stepCountIs, tool, jsonSchema } = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");

const [mode, baseURL, model, apiKey] = process.argv.slice(2);
const TURNS = ["What is the weather in Paris right now? Use the tool.", "And in Tokyo?"];
const calls = [];
const answers = [];
let error = null;

const provider = createOpenAICompatible({ name: "kimi", baseURL, apiKey });
const tools = {
  get_weather: tool({
    description: "Get the current weather for a city",
    inputSchema: jsonSchema({
      type: "object",
      properties: { city: { type: "string", description: "The city" } },
      required: ["city"],
      additionalProperties: false,
    }),
    execute: async ({ city }) => {
      calls.push({ name: "get_weather", arguments: { city } });
      return `${city}: sunny, 21 C`;
    },
  }),
};

try {
  const messages = [];
  for (const turn of TURNS) {
    messages.push({ role: "user", content: turn });
    const args = { model: provider(model), messages, tools, stopWhen: stepCountIs(5), maxOutputTokens: 512, maxRetries: 0 };
    let text, response;
    if (mode === "stream") {
      const result = streamText({ ...args, onError: ({ error: e }) => { error = String(e?.message ?? e).split("\n")[0]; } });
      for await (const _ of result.fullStream) { /* consume as a UI would */ }
      text = await result.text;
      response = await result.response;
    } else {
      const result = await generateText(args);
      text = result.text;
      response = result.response;
    }
    answers.push(text ?? "");
    messages.push(...response.messages);
  }
} catch (e) {
  error = `${e?.name ?? "Error"}: ${String(e?.message ?? e).split("\n")[0]}`;
}
console.log(JSON.stringify({ client: "ai-sdk", mode, calls, answers, error }));
