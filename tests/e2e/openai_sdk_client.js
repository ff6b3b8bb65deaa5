#!/usr/bin/env node
// Drives a calserve daemon with the official OpenAI Node SDK (npm `openai`),
// unchanged: structured outputs through `chat.completions.parse` and `.stream`,
// forced tool calls (named and required) through the same helpers, streaming
// tool-call deltas assembled by the SDK's stream helper, and reasoning with a
// budget. The model has random weights: free text is noise, so every check is on
// what the grammar guarantees (valid JSON matching the schema, call structure).
//
//   node openai_sdk_client.js BASE_URL
// Prints one line per check; exits 0 when all pass, 1 otherwise.
"use strict";
const { loadOpenAI, runChecks } = require("./openai_harness");

const personSchema = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer" },
    member: { type: "boolean" },
    tier: { type: "string", enum: ["free", "pro"] },
    tags: { type: "array", items: { type: "string", enum: ["x", "y"] }, maxItems: 3 },
  },
  required: ["name", "age", "member", "tier", "tags"],
  additionalProperties: false,
};

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    strict: true,
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 10 }, unit: { type: "string", enum: ["c", "f"] }, days: { type: "integer" } },
      required: ["city", "unit", "days"],
      additionalProperties: false,
    },
  },
};

function checkPerson(p) {
  const errors = [];
  if (typeof p !== "object" || p === null || Array.isArray(p)) return ["not an object"];
  const keys = Object.keys(p).sort().join(",");
  if (keys !== "age,member,name,tags,tier") errors.push("keys " + keys);
  if (typeof p.name !== "string" || [...p.name].length > 12) errors.push("name");
  if (!Number.isInteger(p.age)) errors.push("age");
  if (typeof p.member !== "boolean") errors.push("member");
  if (p.tier !== "free" && p.tier !== "pro") errors.push("tier");
  if (!Array.isArray(p.tags) || p.tags.length > 3 || p.tags.some((t) => t !== "x" && t !== "y")) errors.push("tags");
  return errors;
}

function checkWeatherArgs(a) {
  const errors = [];
  if (typeof a !== "object" || a === null) return ["not an object"];
  if (Object.keys(a).sort().join(",") !== "city,days,unit") errors.push("keys");
  if (typeof a.city !== "string" || [...a.city].length > 10) errors.push("city");
  if (a.unit !== "c" && a.unit !== "f") errors.push("unit");
  if (!Number.isInteger(a.days)) errors.push("days");
  return errors;
}


const responseFormat = { type: "json_schema", json_schema: { name: "person", strict: true, schema: personSchema } };
const messages = [{ role: "user", content: "Describe a person." }];

runChecks("openai_sdk_client", async (check) => {
  const OpenAI = loadOpenAI("openai_sdk_client");
  const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0, timeout: 60000 });
  const model = (await client.models.list()).data[0].id;

  // Structured output, non-streaming: the SDK's parse helper returns the object.
  for (const seed of [1, 2, 3]) {
    const c = await client.chat.completions.parse({ model, messages, response_format: responseFormat, max_tokens: 400, seed, temperature: 1 });
    const m = c.choices[0].message;
    check(`parse seed ${seed}: finish stop`, c.choices[0].finish_reason === "stop", c.choices[0].finish_reason);
    check(`parse seed ${seed}: parsed matches the schema`, checkPerson(m.parsed).length === 0, JSON.stringify(m.parsed) + " " + checkPerson(m.parsed));
  }

  // Structured output, streaming: the stream helper assembles and parses.
  {
    const stream = client.chat.completions.stream({ model, messages, response_format: responseFormat, max_tokens: 400, seed: 7 });
    let chunks = 0;
    for await (const _ of stream) chunks++;
    const final = await stream.finalChatCompletion();
    const m = final.choices[0].message;
    check("stream parse: several chunks", chunks > 3, chunks);
    check("stream parse: parsed matches the schema", checkPerson(m.parsed).length === 0, JSON.stringify(m.content));
  }

  // json_object: any JSON object.
  {
    const c = await client.chat.completions.create({ model, messages, response_format: { type: "json_object" }, max_tokens: 300, seed: 5 });
    const text = c.choices[0].message.content;
    let parsed = null;
    try { parsed = JSON.parse(text); } catch (e) { /* checked below */ }
    const fine = c.choices[0].finish_reason === "length" || (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed));
    check("json_object: an object (or cut by max_tokens, said so)", fine, text);
  }

  // Named tool choice: exactly one call, arguments by the parameters schema.
  {
    const c = await client.chat.completions.parse({
      model, messages: [{ role: "user", content: "Weather in Paris?" }], tools: [weatherTool],
      tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 300, seed: 11,
    });
    const ch = c.choices[0];
    check("named tool: finish tool_calls", ch.finish_reason === "tool_calls", ch.finish_reason);
    const calls = ch.message.tool_calls || [];
    check("named tool: one call to get_weather", calls.length === 1 && calls[0].function.name === "get_weather", JSON.stringify(calls));
    check("named tool: id and type", calls.length === 1 && /^call_/.test(calls[0].id) && calls[0].type === "function", JSON.stringify(calls));
    const args = calls.length ? calls[0].function.parsed_arguments : null;
    check("named tool: parsed arguments match the schema", checkWeatherArgs(args).length === 0, calls.length ? calls[0].function.arguments : "none");
  }

  // Required, streaming: deltas name the call, then argument fragments; the helper assembles.
  {
    const stream = client.chat.completions.stream({
      model, messages: [{ role: "user", content: "Weather?" }], tools: [weatherTool], tool_choice: "required",
      max_tokens: 120, seed: 3,
    });
    let fragments = 0;
    let named = 0;
    for await (const chunk of stream) {
      for (const t of chunk.choices[0]?.delta?.tool_calls || []) {
        if (t.function?.name) named++;
        if (t.function?.arguments) fragments++;
      }
    }
    const final = await stream.finalChatCompletion();
    const ch = final.choices[0];
    const calls = ch.message.tool_calls || [];
    check("required stream: at least one call", calls.length >= 1 && named === calls.length, `${calls.length} calls, ${named} named`);
    check("required stream: arguments in several fragments", fragments > calls.length, fragments);
    // Calls before a max_tokens cut are complete; the last one may be cut and the finish says so.
    const complete = ch.finish_reason === "tool_calls" ? calls : calls.slice(0, -1);
    check("required stream: finish tool_calls or length", ch.finish_reason === "tool_calls" || ch.finish_reason === "length", ch.finish_reason);
    for (const [i, c] of complete.entries()) {
      let a = null;
      try { a = JSON.parse(c.function.arguments); } catch (e) { /* checked */ }
      check(`required stream: call ${i} arguments match the schema`, c.function.name === "get_weather" && checkWeatherArgs(a).length === 0, c.function.arguments);
    }
  }

  // Thinking with a budget: reasoning_content apart, then JSON by the schema.
  {
    const c = await client.chat.completions.create({
      model, messages, response_format: responseFormat, max_tokens: 400, seed: 9,
      chat_template_kwargs: { enable_thinking: true }, max_reasoning_tokens: 6,
    });
    const m = c.choices[0].message;
    let parsed = null;
    try { parsed = JSON.parse(m.content); } catch (e) { /* checked */ }
    check("thinking: reasoning_content present", typeof m.reasoning_content === "string" && m.reasoning_content.length > 0, JSON.stringify(m));
    check("thinking: content matches the schema after </think>", checkPerson(parsed).length === 0, m.content);
  }

  // A bad schema is a 400 naming the path, before any generation.
  {
    let status = 0, message = "";
    try {
      await client.chat.completions.create({
        model, messages, response_format: { type: "json_schema", json_schema: { name: "bad", schema: { type: "object", properties: { a: { not: {} } } } } },
      });
    } catch (e) { status = e.status; message = String(e.message); }
    check("bad schema: 400 naming the path", status === 400 && message.includes("/properties/a"), `${status} ${message}`);
  }
});
