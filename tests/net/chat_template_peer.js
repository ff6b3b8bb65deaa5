#!/usr/bin/env node
// Conformance peer for calserve's chat template: renders chat requests with the
// Jinja `chat_template` of the tokenizer package's tokenizer_config.json through
// an independent Jinja implementation (npm @huggingface/jinja).
//
//   node chat_template_peer.js TOKENIZER_DIR IN.jsonl OUT.jsonl
//       IN: one OpenAI chat request body per line (messages, tools,
//       chat_template_kwargs.enable_thinking). OUT: one JSON string per line, the
//       prompt with add_generation_prompt=true and enable_thinking as calserve
//       reads it (absent = false). A null message content renders as "" (as
//       calserve does; Python's Jinja would fail on it).
//
// The package is found through NODE_PATH, else <source>/.cache/npm/node_modules
// (tools/bootstrap installs it there).
"use strict";
const fs = require("fs");
const path = require("path");

function loadJinja() {
  const candidates = ["@huggingface/jinja", path.join(__dirname, "..", "..", ".cache", "npm", "node_modules", "@huggingface", "jinja")];
  for (const c of candidates) {
    try {
      return require(c);
    } catch (e) {
      if (e.code !== "MODULE_NOT_FOUND") throw e;
    }
  }
  console.error("chat_template_peer: npm package @huggingface/jinja not found (run tools/bootstrap)");
  process.exit(3);
}

function main() {
  const [dir, input, output] = process.argv.slice(2);
  if (!dir || !input || !output) {
    console.error("usage: chat_template_peer.js TOKENIZER_DIR IN.jsonl OUT.jsonl");
    process.exit(2);
  }
  const { Template } = loadJinja();
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const template = new Template(config.chat_template);
  const lines = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.length > 0);
  const out = lines.map((line) => {
    const body = JSON.parse(line);
    const messages = body.messages.map((m) => {
      const copy = { ...m };
      if (copy.role === "developer") copy.role = "system";
      if (copy.content === null || copy.content === undefined) copy.content = "";
      if (Array.isArray(copy.content)) copy.content = copy.content.map((p) => p.text).join("");
      return copy;
    });
    const kwargs = body.chat_template_kwargs || {};
    const ctx = {
      messages,
      add_generation_prompt: true,
      enable_thinking: kwargs.enable_thinking === true,
      bos_token: config.bos_token || "",
      eos_token: typeof config.eos_token === "string" ? config.eos_token : "",
    };
    if (body.tools) ctx.tools = body.tools;
    return JSON.stringify(template.render(ctx));
  });
  fs.writeFileSync(output, out.join("\n") + "\n");
}

main();
