// The parts of the kit that need no server: the pre-flight, the replay
// headers, the idempotency key and document id, the JSON of the contract
// (checked against the repository's JSON Schemas with ajv).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { Timestamp } from "@google-cloud/firestore";
import { headers } from "@nats-io/transport-node";

import {
  Budget, budgetFromHeaders, estimateTokens, failureJSON, formatTime, goString, idempotencyDocID, idempotencyKey,
  legacyCompletionsOn, legacyIdempotencyDocID, OverflowError, parseReplay, recordFor, recordMetaJSON, tenant, termReason,
} from "../src/index.js";

test("estimateTokens", () => {
  const cases: [string, number][] = [
    ["", 0], ["abcd", 1], ["abcde", 2], ["word ".repeat(100), 125], ["日本語", 3], ["café", 2], ["😀", 1],
  ];
  for (const [text, want] of cases) assert.equal(estimateTokens(text), want, `estimateTokens(${JSON.stringify(text)})`);
});

test("the pre-flight refuses before the model call", () => {
  const b = new Budget(100);
  assert.deepEqual(b.check("a".repeat(300)), { tokens: 75, maxTokens: 100, warn: false });
  assert.deepEqual(b.check("a".repeat(200), "b".repeat(160)), { tokens: 90, maxTokens: 100, warn: true });
  assert.throws(() => b.check("a".repeat(404)), (err: unknown) => {
    assert.ok(err instanceof OverflowError);
    assert.deepEqual(err.failure(), {
      code: "context_window_overflow", detail: "agentkit: context_window_overflow: about 101 tokens, window 100",
    });
    return true;
  });
  assert.deepEqual(new Budget(0).check("a".repeat(10_000)), { tokens: 2500, maxTokens: 0, warn: false }, "no window admits all");
  const cases: [Record<string, string[]>, number, number][] = [
    [{ "Jsdlq-Max-Context-Tokens": ["80000"] }, 128000, 80000],
    [{ "jsdlq-max-context-tokens": ["bogus"] }, 8000, 8000],
    [{ "Jsdlq-Max-Context-Tokens": ["200000"] }, 8000, 8000],
    [{ "Jsdlq-Max-Context-Tokens": ["4000"] }, 0, 4000],
  ];
  for (const [h, window, want] of cases) {
    assert.equal(budgetFromHeaders(h, window).maxTokens, want, `budgetFromHeaders(${JSON.stringify(h)}, ${window})`);
  }
});

test("parseReplay reads the replay's headers in any case", () => {
  assert.deepEqual(parseReplay({
    "Jsdlq-Replay-Of": [" TASKS-17 "], "jsdlq-replay-attempt": ["2"], "JSDLQ-STRATEGY": ["modified_retry"],
    "Jsdlq-Instruction": ["Stop repeating the search.", "Cite the file."], "Jsdlq-Target-Model": ["large"],
    "Jsdlq-Max-Context-Tokens": ["+32000"], "Jsdlq-Max-Output-Tokens": ["-5"], "Jsdlq-Completed-Steps": ["gather_context", "draft"],
    "X-Task-ID": ["t"],
  }), {
    of: "TASKS-17", attempt: 2, strategy: "modified_retry", instructions: ["Stop repeating the search.", "Cite the file."],
    targetModel: "large", maxContextTokens: 32000, maxOutputTokens: 0, completedSteps: ["gather_context", "draft"], isReplay: true,
  });
  // The same from the headers of a nats.js message.
  const h = headers();
  h.append("Jsdlq-Replay-Of", "TASKS-17");
  h.append("jsdlq-instruction", "one");
  h.append("jsdlq-instruction", "two");
  h.append("Jsdlq-Max-Context-Tokens", "4000");
  h.append("X-Task-ID", "t");
  h.append("X-Task-Version", "3");
  const r = parseReplay(h);
  assert.deepEqual([r.of, r.instructions, r.maxContextTokens, r.isReplay], ["TASKS-17", ["one", "two"], 4000, true]);
  assert.equal(idempotencyKey(h), "t-3");
  assert.equal(budgetFromHeaders(h, 8000).maxTokens, 4000);
  const first = parseReplay(undefined);
  assert.equal(first.isReplay, false);
  assert.equal(parseReplay({ "Jsdlq-Max-Output-Tokens": ["99999999999999999999"] }).maxOutputTokens, 0, "out of range reads as 0");
});

test("idempotencyKey and tenant", () => {
  const keys: [Record<string, string[]>, string][] = [
    [{ "X-Idempotency-Key": [" k1 "], "X-Task-ID": ["t"] }, "k1"],
    [{ "x-task-id": ["t"], "X-Task-Version": ["v2"] }, "t-v2"],
    [{ "X-Task-ID": ["t"] }, "t"],
    [{}, ""],
  ];
  for (const [h, want] of keys) assert.equal(idempotencyKey(h), want, `idempotencyKey(${JSON.stringify(h)})`);
  const tenants: [Record<string, string[]>, string][] = [
    [{ "X-Tenant-ID": ["acme"] }, "acme"],
    [{ "x-tenant-id": ["\u00a0acme\t"] }, "acme"],
    [{ "X-Tenant-ID": [" "] }, "default"],
    [{}, "default"],
  ];
  for (const [h, want] of tenants) assert.equal(tenant(h), want, `tenant(${JSON.stringify(h)})`);
});

test("idempotencyDocID is the Go kit's, scoped by tenant", () => {
  // Pinned: the Go kit's test pins the same ids.
  const pinned: [string, string, string][] = [
    ["acme", "task-1-v1", "tenant-sha256-06b46044e614c7654bdf1cd6b56e6b6d8b8f656680a34c6ff079fb454f7e8a58"],
    ["default", "task-1-v1", "tenant-sha256-3044eaa6a380e16a42df3718290c77bd9347594938de766b6a8e20ba62723feb"],
    // The length prefix counts UTF-8 bytes: 12 for these six characters.
    ["ünï 日本", "t9-2", "tenant-sha256-0b76d6c3f304abf96bb21b9b3ed5707f92e80e647bd091dc9588458805aa0118"],
    ["", "", "tenant-sha256-ba768b331fd86cec803be04e56ab2b3d4c0e98ef4ee4fcd4e72ad7cce61a1d1f"],
  ];
  for (const [t, k, want] of pinned) assert.equal(idempotencyDocID(t, k), want, `idempotencyDocID(${t}, ${k})`);
  const seen = new Map<string, string>();
  for (const [t, k] of [["a", "bc"], ["ab", "c"], ["abc", ""], ["", "abc"], ["acme", "task-1"], ["beta", "task-1"], ["1:a", "b"], ["1", ":ab"],
    ["é", "x"], ["e", "\u0301x"], ["t".repeat(2000), "k".repeat(10000)]] as const) {
    const id = idempotencyDocID(t, k);
    assert.match(id, /^tenant-sha256-[0-9a-f]{64}$/);
    assert.ok(!seen.has(id), `${t}/${k} and ${seen.get(id)} share ${id}`);
    seen.set(id, `${t}/${k}`);
  }
});

test("legacyIdempotencyDocID is the older kits' id", () => {
  for (const key of ["task-1-v1", "Task_7.v2", "ünïcode"]) assert.equal(legacyIdempotencyDocID(key), key);
  const seen = new Map<string, string>();
  for (const key of ["a/b", "a/c", ".", "..", "__x__", "", "k".repeat(1501), "é".repeat(751)]) {
    const id = legacyIdempotencyDocID(key);
    assert.match(id, /^sha256-[0-9a-f]{64}$/, `legacyIdempotencyDocID(${JSON.stringify(key.slice(0, 10))})`);
    assert.ok(!seen.has(id), `${key} and ${seen.get(id)} share ${id}`);
    seen.set(id, key);
  }
  // The same digest as Go's sha256 of the key's UTF-8 bytes.
  assert.equal(legacyIdempotencyDocID("a/b"), "sha256-c14cddc033f64b9dea80ea675cf280a015e672516090a5626781153dc68fea11");
});

test("recordFor: a tenant's record, or an older kit's written after the publish", () => {
  const published = 1_795_000_000_000_000_000n; // nanoseconds
  const at = (deltaNanos: bigint) => {
    const n = published + deltaNanos;
    return new Timestamp(Number(n / 1_000_000_000n), Number(n % 1_000_000_000n));
  };
  const task = { tenant: "acme", key: "k", publishedAt: published };
  const cases: [string, Record<string, unknown>, typeof task | { tenant: string; key: string }, boolean][] = [
    ["the tenant's", { key: "k", tenant: "acme", status: "completed" }, task, true],
    ["another tenant's", { key: "k", tenant: "beta", status: "completed" }, task, false],
    ["another key", { key: "j", tenant: "acme", status: "completed" }, task, false],
    ["older, completed after the publish", { key: "k", status: "completed", completed_at: at(1000n) }, task, true],
    ["older, completed at the publish", { key: "k", status: "completed", completed_at: at(0n) }, task, true],
    ["older, completed a nanosecond before", { key: "k", status: "completed", completed_at: at(-1n) }, task, false],
    ["older, claimed after the publish", { key: "k", status: "in_progress", claimed_at: at(5n) }, task, true],
    ["older, publish time unknown", { key: "k", status: "completed", completed_at: at(1000n) }, { tenant: "acme", key: "k" }, false],
    ["older, no times", { key: "k", status: "completed" }, task, false],
  ];
  for (const [name, rec, t, want] of cases) assert.equal(recordFor(rec, t), want, name);
  const now = new Date(Date.UTC(2026, 10, 21, 12));
  assert.equal(legacyCompletionsOn(undefined, now), true, "no end set");
  assert.equal(legacyCompletionsOn(new Date(now.getTime() + 1), now), true, "a moment before the end");
  assert.equal(legacyCompletionsOn(now, now), false, "at the end");
});

test("the contract's JSON is Go's encoding/json", () => {
  const cases: [string, string][] = [
    ["plain", '"plain"'],
    ['q"\\', '"q\\"\\\\"'],
    ["<a href='x'>&</a>", '"\\u003ca href=\'x\'\\u003e\\u0026\\u003c/a\\u003e"'],
    ["\b\f\n\r\t\u0001\u001f\u007f", '"\\b\\f\\n\\r\\t\\u0001\\u001f\u007f"'],
    ["\u2028\u2029é日😀", '"\\u2028\\u2029é日😀"'],
    ["\ud800", '"\\ufffd"'],
  ];
  for (const [s, want] of cases) assert.equal(goString(s), want, `goString(${JSON.stringify(s)})`);
  const times: [bigint, string][] = [
    [0n, "1970-01-01T00:00:00Z"],
    [1795262400_123456789n, "2026-11-21T12:00:00.123456789Z"],
    [1795262400_120000000n, "2026-11-21T12:00:00.12Z"],
    [1795262400_000000001n, "2026-11-21T12:00:00.000000001Z"],
    [-1n, "1969-12-31T23:59:59.999999999Z"],
  ];
  for (const [ns, want] of times) assert.equal(formatTime(ns), want, `formatTime(${ns})`);
  assert.equal(failureJSON({ code: "x", recordedAt: 0n }), '{"code":"x","recorded_at":"1970-01-01T00:00:00Z"}');
  assert.equal(failureJSON({ code: "x", retryable: false, toolFailure: false, completedSteps: [], recordedAt: 0n }),
    '{"code":"x","retryable":false,"recorded_at":"1970-01-01T00:00:00Z"}', "omitempty as Go's");
});

test("termReason is one line of at most 256 bytes", () => {
  assert.equal(termReason({ code: "impossible_task", detail: "  no\n such\trepo " }), "impossible_task: no such repo");
  assert.equal(termReason({ code: "x" }), "x");
  // Go cuts at byte 256 inside the 85th 日; the server reports each cut-off byte as U+FFFD.
  assert.equal(termReason({ code: "x", detail: "日".repeat(100) }), "x: " + "日".repeat(84) + "\ufffd");
});

const here = dirname(fileURLToPath(import.meta.url));
const docs = join(here, "..", "..", "..", "..", "docs");

test("records and failures conform to docs/record.schema.json and docs/failure.schema.json", () => {
  const ajv = new Ajv2020({ strict: true, strictRequired: false, allErrors: true });
  const addFormats = addFormatsModule as unknown as (a: Ajv2020) => Ajv2020;
  addFormats(ajv);
  for (const f of ["failure.schema.json", "record.schema.json", "idempotency.schema.json"]) {
    ajv.addSchema(JSON.parse(readFileSync(join(docs, f), "utf8")), f);
  }
  const failure = { code: "tool_error", detail: "<x>", attempt: 2, agent: "backend", completedSteps: ["a"], retryable: false,
    toolFailure: true, recordedAt: 1795262400_123456789n };
  const docsOK: [string, string][] = [
    ["failure.schema.json", failureJSON(failure)],
    ["failure.schema.json", failureJSON({ code: "x", recordedAt: 0n })],
    ["record.schema.json", recordMetaJSON({ stream: "TASKS", streamSeq: 7, consumer: "backend", subject: "agents.backend.tasks.review",
      publishedAt: 1795262400_000000500n, deliveries: 1, failure })],
    ["record.schema.json", recordMetaJSON({ stream: "TASKS", streamSeq: 7, subject: "s", publishedAt: 1n, failure: { code: "x", recordedAt: 1n } })],
  ];
  for (const [schema, doc] of docsOK) {
    const ok = ajv.validate(schema, JSON.parse(doc));
    assert.ok(ok, `${schema} refuses ${doc}: ${ajv.errorsText()}`);
  }
  // The schemas are not vacuous: what a kit must never write is refused.
  const refused: [string, unknown][] = [
    ["failure.schema.json", { recorded_at: "2026-11-21T12:00:00Z" }],
    ["failure.schema.json", { code: "x", recorded_at: "2026-11-21T12:00:00.120Z" }],
    ["failure.schema.json", { code: "x", recorded_at: "2026-11-21T12:00:00Z", tool_failure: false }],
    ["record.schema.json", { schema: "jsdlq.record.v1", stream: "TASKS", stream_seq: 0, subject: "s",
      published_at: "2026-11-21T12:00:00Z", failure: { code: "x", recorded_at: "2026-11-21T12:00:00Z" } }],
    ["idempotency.schema.json", { key: "k", status: "completed", expire_at: "2026-11-21T12:00:00Z" }],
  ];
  for (const [schema, doc] of refused) assert.equal(ajv.validate(schema, doc), false, `${schema} accepts ${JSON.stringify(doc)}`);
});
