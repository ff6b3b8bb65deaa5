// What the OpenAI SDK clients (openai_sdk_client.js, openai_responses_client.js)
// share: finding the npm `openai` package, one line per check, and the exit code.
"use strict";
const path = require("path");

// The SDK's constructor, from a global install or the one tools/bootstrap puts in .cache/npm.
function loadOpenAI(who) {
  const candidates = ["openai", path.join(__dirname, "..", "..", ".cache", "npm", "node_modules", "openai")];
  for (const c of candidates) {
    try {
      const m = require(c);
      return m.default || m;
    } catch (e) {
      if (e.code !== "MODULE_NOT_FOUND") throw e;
    }
  }
  console.error(`${who}: npm package openai not found (run tools/bootstrap)`);
  process.exit(3);
}

// Runs `body(check)`; prints one line per check and exits 0 when all passed, 1 otherwise.
function runChecks(who, body) {
  let failed = 0;
  const check = (name, ok, detail) => {
    console.log((ok ? "ok   " : "FAIL ") + name + (ok ? "" : ": " + detail));
    if (!ok) failed++;
  };
  body(check).then(() => {
    console.log(`${failed === 0 ? "all checks passed" : failed + " checks failed"}`);
    process.exit(failed === 0 ? 0 : 1);
  }, (e) => {
    console.error(`${who}: ` + (e.stack || e));
    process.exit(1);
  });
}

module.exports = { loadOpenAI, runChecks };
