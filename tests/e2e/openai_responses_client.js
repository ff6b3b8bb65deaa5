#!/usr/bin/env node
// Drives a calserve daemon's Responses API (POST /v1/responses) with the official
// OpenAI Node SDK (npm `openai`), unchanged: `client.responses.create` with text
// and message-array input, instructions and sampling, max_output_tokens,
// `text.format` with a JSON schema (`responses.parse`), function tools, reasoning,
// streaming (typed events, and the `responses.stream` helper), a refused
// `previous_response_id`, and `models.retrieve`. Random weights: checks are on
// structure and on what the grammar guarantees, never on free text.
//
//   node openai_responses_client.js BASE_URL
// Prints one line per check; exits 0 when all pass, 1 otherwise.
"use strict";
const { loadOpenAI, runChecks } = require("./openai_harness");

const personSchema = {
  type: "object",
  properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" } },
  required: ["name", "age"],
  additionalProperties: false,
};
const weatherTool = {
  type: "function", name: "get_weather", description: "Weather for a city", strict: true,
  parameters: {
    type: "object", properties: { city: { type: "string", maxLength: 10 } }, required: ["city"], additionalProperties: false,
  },
};

const isPerson = (p) => p && typeof p === "object" && typeof p.name === "string" && Number.isInteger(p.age) &&
  Object.keys(p).sort().join(",") === "age,name";
const lengthOk = (r, max) => (r.status === "incomplete" && r.incomplete_details?.reason === "max_output_tokens" &&
  r.usage.output_tokens === max) || (r.status === "completed" && r.usage.output_tokens <= max);

runChecks("openai_responses_client", async (check) => {
  const OpenAI = loadOpenAI("openai_responses_client");
  const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });
  const model = (await client.models.list()).data[0].id;
  check("models.retrieve: the served model", (await client.models.retrieve(model)).id === model, model);

  // Text input, non-streaming.
  const a = await client.responses.create({ model, input: "Hello there", max_output_tokens: 6, temperature: 0 });
  check("text input: a response object", a.object === "response" && /^resp_/.test(a.id), JSON.stringify(a).slice(0, 200));
  check("text input: status and length", lengthOk(a, 6), `${a.status} ${JSON.stringify(a.usage)}`);
  check("text input: integer usage", Number.isInteger(a.usage.input_tokens) && a.usage.total_tokens ===
    a.usage.input_tokens + a.usage.output_tokens, JSON.stringify(a.usage));
  check("text input: output_text from a message item", typeof a.output_text === "string" &&
    a.output.some((o) => o.type === "message" && o.content[0].type === "output_text"), JSON.stringify(a.output));
  check("store is false (nothing is stored)", a.store === false, a.store);

  // Message array with instructions: greedy, so the same twice; the same as plain text input.
  const msgs = { model, instructions: "Be brief.", input: [{ role: "user", content: [{ type: "input_text", text: "Hi" }] }],
    max_output_tokens: 8, temperature: 0 };
  const b1 = await client.responses.create(msgs);
  const b2 = await client.responses.create(msgs);
  check("message input: greedy answers equal", b1.output_text === b2.output_text, `${b1.output_text} | ${b2.output_text}`);
  check("message input: instructions echoed", b1.instructions === "Be brief.", b1.instructions);
  check("message input: the instructions are in the prompt", b1.usage.input_tokens > a.usage.input_tokens, JSON.stringify(b1.usage));

  // JSON schema through text.format: the SDK's parse helper.
  const p = await client.responses.parse({ model, input: "A person", max_output_tokens: 300, seed: 3, temperature: 1,
    text: { format: { type: "json_schema", name: "person", strict: true, schema: personSchema } } });
  check("text.format json_schema: output_parsed matches", p.status !== "completed" || isPerson(p.output_parsed), p.output_text);

  // A function tool, forced: one function_call item with arguments by its schema.
  const t = await client.responses.create({ model, input: "Weather in Paris?", tools: [weatherTool],
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 120, seed: 5 });
  const calls = t.output.filter((o) => o.type === "function_call");
  let args = null;
  try { args = JSON.parse(calls[0]?.arguments); } catch (e) { /* checked */ }
  check("tools: one function_call to get_weather", calls.length === 1 && calls[0].name === "get_weather" &&
    typeof calls[0].call_id === "string" && args && typeof args.city === "string", JSON.stringify(t.output));

  // The call's output sent back as items.
  const back = await client.responses.create({ model, tools: [weatherTool], max_output_tokens: 4, temperature: 0, input: [
    { role: "user", content: "Weather?" },
    { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
    { type: "function_call_output", call_id: "call_1", output: "sunny" }] });
  check("function_call_output input: answered", back.object === "response" && lengthOk(back, 4), back.status);

  // Reasoning (Qwen3 thinking): a reasoning item first.
  const r = await client.responses.create({ model, input: "Think", reasoning: { effort: "low" }, max_output_tokens: 12, seed: 2 });
  check("reasoning: a reasoning item first", r.output.length > 0 && r.output[0].type === "reasoning", JSON.stringify(r.output));

  // Streaming: typed events with sequence numbers, deltas adding up to the final text.
  const s = await client.responses.create({ model, input: "Hello there", max_output_tokens: 6, temperature: 0, stream: true });
  const types = [];
  let deltas = "", seq = -1, ordered = true, final = null;
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.sequence_number !== seq + 1) ordered = false;
    seq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") deltas += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
  }
  check("stream: created, in_progress first", types[0] === "response.created" && types[1] === "response.in_progress", types.join(","));
  check("stream: item and part events", types.includes("response.output_item.added") && types.includes("response.content_part.added") &&
    types.includes("response.output_text.done") && types.includes("response.output_item.done"), types.join(","));
  check("stream: ends with completed or incomplete", final !== null && /^response\.(completed|incomplete)$/.test(types[types.length - 1]), types.join(","));
  check("stream: sequence numbers 0, 1, 2, ...", ordered, types.length);
  check("stream: deltas add up to the text, the same as non-streaming", final && deltas === a.output_text &&
    final.output.find((o) => o.type === "message")?.content[0].text === deltas, `${deltas} | ${a.output_text}`);

  // The stream helper assembles the final response.
  const helper = client.responses.stream({ model, input: "Hello there", max_output_tokens: 6, temperature: 0 });
  let helperDeltas = 0;
  helper.on("response.output_text.delta", () => helperDeltas++);
  const hf = await helper.finalResponse();
  check("stream helper: finalResponse", hf.output_text === a.output_text && helperDeltas > 0, `${hf.output_text} ${helperDeltas}`);

  // Reasoning then a forced call, streamed through the helper (reasoning_text parts, argument deltas).
  const rt = client.responses.stream({ model, input: "Think, then call", reasoning: { effort: "low" }, max_reasoning_tokens: 4,
    tools: [weatherTool], tool_choice: "required", max_output_tokens: 80, seed: 1 });
  const rf = await rt.finalResponse();
  const kinds = rf.output.map((o) => o.type).join(",");
  let rargs = null;
  try { rargs = JSON.parse(rf.output.find((o) => o.type === "function_call")?.arguments); } catch (e) { /* checked */ }
  check("stream helper: reasoning, then a function_call by the schema", rf.status !== "completed" ||
    (/^reasoning,function_call/.test(kinds) && rargs && typeof rargs.city === "string"), `${rf.status} ${kinds}`);

  // Nothing is stored: previous_response_id is refused by name.
  let status = 0, message = "";
  try {
    await client.responses.create({ model, input: "again", previous_response_id: a.id });
  } catch (e) { status = e.status; message = String(e.message); }
  check("previous_response_id: 400 naming it", status === 400 && message.includes("previous_response_id"), `${status} ${message}`);

});
