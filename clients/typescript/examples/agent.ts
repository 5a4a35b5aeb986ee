// agent is the example agent of examples/agent written on the TypeScript
// kit: the demo fleet runs one of its seven agents on it (make demo). It
// consumes agents.<name>.tasks.> from the TASKS stream and does fake work
// steered by task headers: X-Demo-Fail selects a failure mode (transient,
// context_window_overflow, hallucination_loop, token_budget_exceeded,
// permanent, poison, governance, partial_write, bare_term, silent),
// X-Demo-Fail-Probability makes it random, X-Demo-Fail-Code overrides the
// reason code, X-Demo-Work-Time (a Go duration) sets how long the work takes
// (the kit keeps a task longer than the consumer's AckWait alive). A replay that carries the strategy's headers succeeds where
// the original failed; a replay skips the steps its failed attempt
// completed. It logs JSON lines like the Go agent ("agent ready", "task
// settled" with outcome, task_id and steps_skipped).
//
//   node dist/examples/agent.js --name frontend
//
// Environment: NATS_URL, GOOGLE_CLOUD_PROJECT and FIRESTORE_EMULATOR_HOST
// (the Firestore of the idempotency records), RECORD_STREAM, FAILURE_BUCKET.

import { Firestore } from "@google-cloud/firestore";
import { AckPolicy, jetstream, jetstreamManager, RetentionPolicy, type ConsumerConfig, type JsMsg } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import { parseArgs } from "node:util";

import {
  Budget, budgetFromHeaders, eventID, header, HeaderInstruction, HeaderMaxOutputTokens, HeaderReplayOf, HeaderTargetModel,
  HeaderTaskID, ClaimLostError, InProgressError, Kit, OverflowError, replayOf, taskOf, toHeaderMap, type Failure, type HeaderMap,
} from "../src/index.js";

const steps = ["gather_context", "draft", "deliver"];
const modes = ["none", "transient", "context_window_overflow", "hallucination_loop", "token_budget_exceeded", "permanent",
  "poison", "governance", "partial_write", "bare_term", "silent"];

type Outcome = "done" | "skipped_completed" | "failed_nak" | "terminated" | "in_progress_elsewhere" | "claim_lost";

function log(severity: "INFO" | "WARNING" | "ERROR", message: string, attrs: Record<string, unknown> = {}): void {
  process.stderr.write(JSON.stringify({ timestamp: new Date().toISOString(), severity, message, component: "agent", ...attrs }) + "\n");
}

// duration reads a Go duration ("20ms", "1m30s") as milliseconds.
function duration(s: string): number {
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/gy;
  const unit: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  let ms = 0;
  let m: RegExpExecArray | null;
  let end = 0;
  while ((m = re.exec(s)) !== null) {
    ms += Number(m[1]) * unit[m[2]!]!;
    end = re.lastIndex;
  }
  if (s === "" || end !== s.length || ms <= 0) throw new Error(`${JSON.stringify(s)} is not a positive duration`);
  return ms;
}

// mulberry32: the agent's seeded random numbers.
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const { values: o } = parseArgs({
  options: {
    name: { type: "string", default: "" },
    stream: { type: "string", default: "TASKS" },
    consumer: { type: "string", default: "" },
    subject: { type: "string", default: "" },
    "nats-url": { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    project: { type: "string", default: process.env.GOOGLE_CLOUD_PROJECT ?? "" },
    idempotency: { type: "string", default: "true" },
    "max-deliver": { type: "string", default: "3" },
    "max-ack-pending": { type: "string", default: "1" },
    "ack-wait": { type: "string", default: "5m" },
    backoff: { type: "string", default: "30s,2m,5m" },
    "create-stream": { type: "string", default: "true" },
    fail: { type: "string", default: "none" },
    "fail-probability": { type: "string", default: "1" },
    "context-window": { type: "string", default: "8000" },
    "work-time": { type: "string", default: "50ms" },
    seed: { type: "string", default: "0" },
    "record-stream": { type: "string", default: process.env.RECORD_STREAM ?? "DLQ_RECORDS" },
    "failure-bucket": { type: "string", default: process.env.FAILURE_BUCKET ?? "dlq_failures" },
  },
  // Flags as the Go agent takes them: --create-stream=false.
  allowPositionals: false,
});

const problems: string[] = [];
if (!o.name || /[. *>]/.test(o.name)) problems.push("--name is required and must be one subject token");
if (!modes.includes(o.fail!)) problems.push(`--fail ${JSON.stringify(o.fail)} is not one of ${modes.join(", ")}`);
const idempotent = o.idempotency !== "false";
if (idempotent && !o.project) problems.push("--idempotency needs --project or GOOGLE_CLOUD_PROJECT (or pass --idempotency=false)");
let backoff: number[] = [];
let ackWait = 0;
let workTime = 0;
try {
  backoff = o.backoff!.split(",").map((s) => s.trim()).filter((s) => s !== "").map(duration);
  ackWait = duration(o["ack-wait"]!);
  workTime = duration(o["work-time"]!);
} catch (err) {
  problems.push(String(err));
}
if (problems.length > 0) {
  log("ERROR", "bad flags", { error: problems.join("; ") });
  process.exit(2);
}
const name = o.name!;
const consumerName = o.consumer || name;
const subject = o.subject || `agents.${name}.tasks.>`;
const maxDeliver = Number(o["max-deliver"]);
const maxAckPending = Math.max(Number(o["max-ack-pending"]), 1);
const failProb = Number(o["fail-probability"]);
const contextWindow = Number(o["context-window"]);
const seed = Number(o.seed) || Date.now();
const rand = random(seed);

const nc = await connect({ servers: o["nats-url"], name: `jsdlq-agent-${name}` });
log("INFO", "nats connected", { agent: name, url: o["nats-url"], server: nc.info?.server_name });
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
if (o["create-stream"] !== "false") {
  try {
    await jsm.streams.info(o.stream!);
  } catch {
    await jsm.streams.add({ name: o.stream!, subjects: ["agents.>"], retention: RetentionPolicy.Workqueue,
      duplicate_window: nanos(3_600_000), allow_direct: true });
  }
}
// The server refuses more BackOff entries than redeliveries.
const bo = maxDeliver > 0 && backoff.length >= maxDeliver ? backoff.slice(0, maxDeliver - 1) : backoff;
const cfg: Partial<ConsumerConfig> = {
  durable_name: consumerName, filter_subject: subject, ack_policy: AckPolicy.Explicit, max_deliver: maxDeliver,
  ack_wait: nanos(ackWait), backoff: bo.map((ms) => nanos(ms)), max_ack_pending: maxAckPending,
};
try {
  await jsm.consumers.add(o.stream!, cfg);
} catch {
  await jsm.consumers.update(o.stream!, consumerName, cfg);
}
// On the emulator there is no metadata server to ask for credentials.
if (process.env.FIRESTORE_EMULATOR_HOST) process.env.METADATA_SERVER_DETECTION ??= "none";
const fs = idempotent ? new Firestore({ projectId: o.project! }) : undefined;
const kit = new Kit(nc, {
  agent: name, firestore: fs, recordStream: o["record-stream"], failureBucket: o["failure-bucket"],
  logger: { warn: (message, attrs) => log("WARNING", message, { agent: name, ...attrs }) },
});

function skippedSteps(m: JsMsg): string[] {
  const done = replayOf(m).completedSteps;
  return steps.filter((s) => done.includes(s));
}

function fixedBy(h: HeaderMap, ...names: string[]): boolean {
  return names.some((n) => header(h, n) !== "");
}

function validJSON(data: Uint8Array): boolean {
  try {
    JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
    return true;
  } catch {
    return false;
  }
}

async function terminate(m: JsMsg, f: Failure): Promise<Outcome> {
  await kit.terminate(m, f);
  return "terminated";
}

// handle processes one task and always settles it (ack, NAK or TERM).
async function handle(m: JsMsg): Promise<Outcome> {
  const h = toHeaderMap(m.headers);
  const mode = header(h, "X-Demo-Fail") || o.fail!;
  let prob = failProb;
  const pv = header(h, "X-Demo-Fail-Probability");
  if (pv !== "" && !Number.isNaN(Number(pv))) prob = Number(pv);
  const fails = mode !== "" && mode !== "none" && rand() < prob;
  const code = (def: string) => header(h, "X-Demo-Fail-Code") || def;
  const replay = header(h, HeaderReplayOf) !== "";
  if (fails) {
    switch (mode) {
      case "transient":
        if (!replay) {
          await kit.fail(m, { code: code("llm_provider_timeout"), detail: "provider did not answer in 60s", completedSteps: steps.slice(0, 1) });
          return "failed_nak";
        }
        break;
      case "context_window_overflow": {
        let window = contextWindow;
        if (header(h, HeaderTargetModel) !== "") window *= 4; // a larger-context model
        let need = 2 * contextWindow;
        const v = Number.parseInt(header(h, "X-Demo-Context-Tokens"), 10);
        if (v > 0) need = v;
        // A replay's Jsdlq-Max-Context-Tokens makes the agent compress its context.
        const c = budgetFromHeaders(h, 0).maxTokens;
        if (c > 0 && c < need) need = c;
        try {
          kit.preflight(new Budget(window), "tokn".repeat(need));
        } catch (err) {
          if (err instanceof OverflowError) return terminate(m, err.failure());
          throw err;
        }
        break;
      }
      case "hallucination_loop":
        if (!fixedBy(h, HeaderInstruction, HeaderTargetModel)) {
          return terminate(m, { code: code("hallucination_loop"), detail: "the same tool call repeated 5 times with invented arguments" });
        }
        break;
      case "token_budget_exceeded":
        if (!fixedBy(h, HeaderMaxOutputTokens)) {
          return terminate(m, { code: code("token_budget_exceeded"), detail: "output budget of 4000 tokens exhausted while drafting",
            completedSteps: steps.slice(0, 1) });
        }
        break;
      case "permanent":
        return terminate(m, { code: code("impossible_task"), detail: "the repository does not exist" });
      case "poison":
        if (!validJSON(m.data)) return terminate(m, { code: code("payload_unmarshal_failed"), detail: "payload is not JSON" });
        break;
      case "governance":
        return terminate(m, { code: code("approval_required"), detail: "production deploy needs approval" });
      case "partial_write":
        return terminate(m, { code: code("partial_external_write"), detail: "tool call failed after the PR comment was posted",
          completedSteps: ["post_pr_comment"] });
      case "bare_term":
        m.term(code("impossible_task") + ": terminated without agentkit");
        return "terminated";
      case "silent":
        m.nak();
        return "failed_nak";
      default:
        log("WARNING", "unknown demo failure mode; treating the task as healthy", { agent: name, mode });
    }
  }
  return complete(m);
}

// taskWorkTime is how long m's fake work takes: its X-Demo-Work-Time, else the agent's.
function taskWorkTime(h: HeaderMap): number {
  try {
    return duration(header(h, "X-Demo-Work-Time"));
  } catch {
    return workTime;
  }
}

// complete does m's work and settles it. The work is kept alive (the kit
// sends in-progress acks and renews once's claim), so a task longer than the
// consumer's AckWait is neither redelivered mid-work nor run twice.
async function complete(m: JsMsg): Promise<Outcome> {
  const skip = skippedSteps(m);
  const perStep = taskWorkTime(toHeaderMap(m.headers)) / steps.length;
  const work = async (signal: AbortSignal) => {
    for (const s of steps) {
      if (skip.includes(s)) continue; // done by the attempt that failed
      signal.throwIfAborted();
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(resolve, perStep);
        signal.addEventListener("abort", () => { clearTimeout(t); reject(signal.reason); }, { once: true });
      });
    }
  };
  if (!idempotent) {
    try {
      await kit.keepAlive(m, work);
    } catch (err) {
      m.nak();
      throw err;
    }
    m.ack();
    return "done";
  }
  // A task without an idempotency key is keyed by its stream and sequence,
  // so its redeliveries still run once.
  const task = taskOf(m);
  task.key ||= eventID(m.info.stream, m.info.streamSequence);
  let ran: boolean;
  try {
    ran = await kit.once(task, work);
  } catch (err) {
    if (err instanceof ClaimLostError) return "claim_lost"; // neither ack nor NAK: the server redelivers it
    if (err instanceof InProgressError) {
      m.nak(5000);
      return "in_progress_elsewhere";
    }
    m.nak(1000);
    throw err;
  }
  m.ack();
  return ran ? "done" : "skipped_completed";
}

const consumer = await js.consumers.get(o.stream!, consumerName);
const messages = await consumer.consume({ max_messages: maxAckPending });
log("INFO", "agent ready", { agent: name, stream: o.stream, consumer: consumerName, subject, fail: o.fail, kit: "typescript" });
const stop = () => {
  void messages.close();
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
for await (const m of messages) {
  let outcome: Outcome = "failed_nak";
  let error: unknown;
  try {
    outcome = await handle(m);
  } catch (err) {
    error = err;
  }
  const attrs: Record<string, unknown> = { agent: name, subject: m.subject, outcome, task_id: header(toHeaderMap(m.headers), HeaderTaskID) };
  if (outcome === "done") attrs.steps_skipped = skippedSteps(m).length;
  attrs.stream_seq = m.info.streamSequence;
  attrs.delivery = m.info.deliveryCount;
  if (error !== undefined) {
    log("WARNING", "task settled with an error", { ...attrs, error: error instanceof Error ? error.message : String(error) });
  } else {
    log("INFO", "task settled", attrs);
  }
}
await nc.drain();
await fs?.terminate();
log("INFO", "agent stopped", { agent: name });
