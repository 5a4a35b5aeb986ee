// Triage answers: reading the task, checking the answer, settling the
// message, and the triage endpoint's answers read back as the Go kit reads
// them (the endpoint itself is held to both kits by internal/kitcompat).

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { RetentionPolicy } from "@nats-io/jetstream";
import { headers } from "@nats-io/transport-node";

import {
  approve, BadAnswerError, BadTriageError, checkAnswer, discard, Kit, parseTriage, replayAnswer, TriageClient, TriageDecidedError,
  TriageNotFoundError, TriagePath, TriageRefusedError, TriageUnfinishedError, type Answerer, type TriageTask,
} from "../src/index.js";
import { fixture, next } from "../testkit/env.js";

// task is a triage task as notify sends it for an escalated entry.
function task(over: Partial<TriageTask> = {}): TriageTask {
  return {
    schema: "jsdlq.triage.v1", notification_id: "n-0123456789abcdef0123456789abcdef", entry_id: "TASKS.7", tenant: "acme",
    agent: "ceo", task_type: "billing", status: "escalated", category: "permanent", reason: "impossible_task", action: "escalate",
    summary: "entry TASKS.7 is escalated", console_url: "https://console.example/entries/TASKS.7", answers: ["replay", "discard"],
    at: "2026-11-23T09:00:00Z", ...over,
  };
}

const enc = new TextEncoder();
const hdrs = (entry = "TASKS.7", tenant = "acme") => ({ "Jsdlq-Triage-Entry": [entry], "X-Tenant-ID": [tenant] });

test("parseTriage reads a triage task and refuses malformed, foreign or forged ones", () => {
  assert.deepEqual(parseTriage(hdrs(), enc.encode(JSON.stringify(task()))), task());
  const bad: [string, Record<string, string[]>, string][] = [
    ["not JSON", hdrs(), "{"],
    ["another schema", hdrs(), JSON.stringify(task({ schema: "jsdlq.triage.v2" }))],
    ["no entry", hdrs(""), JSON.stringify(task({ entry_id: "" }))],
    ["no answers", hdrs(), JSON.stringify(task({ answers: [] }))],
    ["an unknown answer", hdrs(), JSON.stringify(task({ answers: ["ignore"] }))],
    ["a number for a string", hdrs(), JSON.stringify({ ...task(), tenant: 7 })],
    ["headers naming another entry", hdrs("TASKS.8"), JSON.stringify(task())],
    ["headers naming another tenant", hdrs("TASKS.7", "globex"), JSON.stringify(task())],
    ["no entry header", {}, JSON.stringify(task())],
  ];
  for (const [name, h, body] of bad) assert.throws(() => parseTriage(h, enc.encode(body)), BadTriageError, name);
});

test("an answer must be one the task offers, and a discard says why", () => {
  const awaiting = task({ status: "awaiting_approval", answers: ["approve", "discard"] });
  const cases: [string, TriageTask, ReturnType<typeof approve>, boolean][] = [
    ["replay escalated", task(), replayAnswer(), true],
    ["discard with a reason", task(), discard("the repository is gone"), true],
    ["discard without a reason", task(), discard(" "), false],
    ["approve escalated", task(), approve(), false],
    ["approve awaiting", awaiting, approve(enc.encode("{}"), { "X-Fixed": "1" }), true],
    ["replay awaiting", awaiting, replayAnswer(), false],
    ["unknown", task(), { answer: "ignore" }, false],
  ];
  for (const [name, t, a, ok] of cases) {
    if (ok) checkAnswer(a, t);
    else assert.throws(() => checkAnswer(a, t), BadAnswerError, name);
  }
});

// handleTriage settles every triage task: acked when answered or when no
// retry can help, NAKed when one can, and a malformed task terminated
// through terminate, so it is recorded like any dead task.
test("handleTriage settles every triage task", async () => {
  const f = await fixture({ dlq: true, retention: RetentionPolicy.Limits });
  try {
    const kit = new Kit(f.nc, { agent: "ceo" });
    const errs: Record<string, Error> = {
      "TASKS.decided": new TriageDecidedError("entry is replayed"),
      "TASKS.refused": new TriageRefusedError("payload missing"),
      "TASKS.elsewhere": new TriageNotFoundError("no such entry"),
      "TASKS.unfinished": new TriageUnfinishedError("cloud tasks down", "scheduled"),
      "TASKS.down": new Error("firestore unavailable"),
    };
    const answerer: Answerer = {
      async answerTriage(t, _a, by) {
        if (by !== "agent:ceo") throw new Error(`answered as ${by}`);
        const e = errs[t.entry_id];
        if (e) throw e;
        return "scheduled";
      },
    };
    const decide = async (t: TriageTask) => {
      if (t.entry_id === "TASKS.undecided") throw new Error("the model is down");
      return replayAnswer();
    };
    const cases: [string, string][] = [
      ["TASKS.ok", "answered"], ["TASKS.unfinished", "answered"], ["TASKS.decided", "already_decided"], ["TASKS.refused", "refused"],
      ["TASKS.elsewhere", "refused"], ["TASKS.down", "retry"], ["TASKS.undecided", "retry"], ["malformed", "malformed"],
    ];
    for (const [entry, want] of cases) {
      const h = headers();
      h.set("Jsdlq-Triage-Entry", entry);
      h.set("X-Tenant-ID", "acme");
      h.set("Nats-Msg-Id", entry);
      const body = entry === "malformed" ? "not a triage task" : JSON.stringify(task({ entry_id: entry }));
      await f.js.publish("agents.ceo.tasks.dlq_triage", body, { headers: h });
      const m = await next(f.js);
      const got = await kit.handleTriage(m, answerer, decide);
      assert.equal(got.outcome, want, entry);
      if (want !== "answered" || entry === "TASKS.unfinished") assert.ok(got.error, `${entry}: the error says why`);
      // Backoff 100 ms: a NAKed task comes back at once; a settled one never.
      let again: Awaited<ReturnType<typeof next>> | undefined;
      try {
        again = await next(f.js, 1000);
        again.ack();
      } catch {
        again = undefined;
      }
      assert.equal(again !== undefined, want === "retry", `${entry}: redelivered`);
    }
    const rec = await f.jsm.streams.getMessage("DLQ_RECORDS", { last_by_subj: "dlq.records.TASKS" });
    assert.equal(JSON.parse(rec!.header.get("Jsdlq-Record")).failure.code, "schema_invalid");
  } finally {
    await f.close();
  }
});

// The endpoint's statuses read back as the Go kit's TriageClient reads
// them, with the request it sends: the task's known fields, the payload in
// base64, the bearer token.
test("TriageClient reads the endpoint's answers as the Go kit does", async () => {
  let last: { auth?: string; body?: Record<string, unknown>; path?: string } = {};
  let reply = { status: 200, body: "" };
  const srv = createServer((req, res) => {
    let b = "";
    req.on("data", (c: Buffer) => { b += c.toString("utf8"); });
    req.on("end", () => {
      last = { auth: req.headers.authorization, body: JSON.parse(b) as Record<string, unknown>, path: req.url };
      res.writeHead(reply.status, { "Content-Type": "application/json" });
      res.end(reply.body);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  try {
    const addr = srv.address() as { port: number };
    const client = new TriageClient(`http://127.0.0.1:${addr.port}/`, async () => "tok");
    const err = (code: string, message: string) => JSON.stringify({ error: { code, message } });
    reply = { status: 200, body: JSON.stringify({ status: "scheduled" }) };
    assert.equal(await client.answerTriage(task({ console_url: "" }), replayAnswer(enc.encode("{}"), { "X-Fix": "1" })), "scheduled");
    assert.equal(last.path, TriagePath);
    assert.equal(last.auth, "Bearer tok");
    const sent: Partial<TriageTask> = task();
    delete sent.console_url; // empty: left out, as Go leaves it out
    assert.deepEqual(last.body, { task: sent, answer: "replay", payload: "e30=", set_headers: { "X-Fix": "1" } });
    const cases: [number, string, (e: unknown) => boolean][] = [
      [400, err("invalid_argument", "bad"), (e) => e instanceof BadAnswerError],
      [403, err("permission_denied", "rule x"), (e) => e instanceof TriageRefusedError && e.permissionDenied],
      [404, err("not_found", "no such entry"), (e) => e instanceof TriageNotFoundError],
      [409, err("failed_precondition", "moved on"), (e) => e instanceof TriageDecidedError],
      [422, err("failed_precondition", "payload missing"), (e) => e instanceof TriageRefusedError && !e.permissionDenied],
      [200, JSON.stringify({ status: "scheduled", note: "left to reconcile" }), (e) => e instanceof TriageUnfinishedError && e.status === "scheduled"],
      [401, err("unauthenticated", "token"), (e) => e instanceof Error && !(e instanceof TriageRefusedError || e instanceof BadAnswerError)],
      [500, err("internal", "internal error"), (e) => e instanceof Error && !(e instanceof TriageRefusedError)],
      [200, "{}", (e) => e instanceof Error && !(e instanceof TriageUnfinishedError)],
    ];
    for (const [status, body, ok] of cases) {
      reply = { status, body };
      await assert.rejects(client.answerTriage(task(), discard("x")), ok, `${status} ${body}`);
    }
  } finally {
    srv.close();
  }
});
