// check.js SCHEMA DIR: compiles the JSON Schema (draft 2020-12) at SCHEMA
// with ajv in strict mode — any strict-mode finding fails — and validates
// every *.json file in DIR against it, with formats (date-time) asserted.
// .ci/schema-check runs it on docs/contracts/omni-inbound-envelope.v1.json
// and the envelopes the Go tests wrote to $SWITCHYARD_ENVELOPE_DUMP.
"use strict";
const fs = require("fs");
const path = require("path");
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

const [schemaPath, dir] = process.argv.slice(2);
if (!schemaPath || !dir) {
  console.error("usage: node check.js SCHEMA DIR");
  process.exit(2);
}

// Every strict-mode rule is on; findings are collected rather than thrown
// one at a time, so a run lists them all.
const findings = [];
const collect = (msg, ...rest) => findings.push([msg, ...rest].join(" "));
const ajv = new Ajv2020({
  strict: true,
  strictSchema: "log",
  strictNumbers: "log",
  strictTypes: "log",
  strictTuples: "log",
  strictRequired: "log",
  allErrors: true,
  validateFormats: true,
  logger: { log() {}, warn: collect, error: collect },
});
addFormats(ajv);

let validate;
try {
  validate = ajv.compile(JSON.parse(fs.readFileSync(schemaPath, "utf8")));
} catch (err) {
  findings.push(err.message);
}
if (findings.length > 0) {
  console.error(`${schemaPath}: ${findings.length} finding(s) in ajv's strict mode:`);
  for (const f of findings) console.error("  " + f);
  process.exit(1);
}
console.log(`${schemaPath}: compiled in ajv's strict mode, no findings`);

const files = fs.readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
if (files.length === 0) {
  console.error(`${dir}: no envelopes to validate (did the Go tests run with SWITCHYARD_ENVELOPE_DUMP set?)`);
  process.exit(1);
}
let passed = 0;
let failed = 0;
for (const f of files) {
  const text = fs.readFileSync(path.join(dir, f), "utf8");
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    failed++;
    console.error(`${f}: not JSON: ${err.message}`);
    continue;
  }
  if (validate(doc)) {
    passed++;
    continue;
  }
  failed++;
  console.error(`${f}: does not match the schema:`);
  for (const e of validate.errors.slice(0, 10)) console.error(`  ${e.instancePath || "/"} ${e.message} (${e.schemaPath})`);
  console.error("  " + text.slice(0, 2000));
}
console.log(`envelopes: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
