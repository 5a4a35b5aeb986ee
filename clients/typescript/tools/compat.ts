// compat drives the TypeScript kit for the cross-language test
// (internal/kitcompat): it reads a run from stdin, takes the consumer's
// deliveries one by one and does what each step says with the kit, as the
// Go side of the test does with the Go kit on the same deliveries, and
// prints what happened to stdout as JSON. A run with mode "publish"
// publishes tasks with the predictions' pre-flight instead, one with mode
// "triage" answers triage tasks through a console's triage endpoint. Not
// part of the package.
//
//   node dist/tools/compat.js < run.json

import { Firestore } from "@google-cloud/firestore";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

import {
  Budget, idempotencyDocID, Kit, OverflowError, taskOf, TriageClient, type Failure, type TriageAnswer,
} from "../src/index.js";

interface WireFailure {
  code: string;
  detail?: string;
  completed_steps?: string[];
  retryable?: boolean;
  tool_failure?: boolean;
}

interface Step {
  /**
   * once works on the delivery's task (taskOf); keepalive too, with a
   * keep-alive interval of keep_alive_ms, until its claim was renewed.
   */
  do: "terminate" | "fail" | "once" | "keepalive" | "preflight";
  failure?: WireFailure;
  prompt?: string;
  window?: number;
}

interface Run {
  /** "publish": publish the publishes (publishRun); else do the steps. */
  mode?: string;
  nats_url: string;
  project: string;
  stream: string;
  consumer: string;
  agent: string;
  /** The kit's clock, RFC 3339 (millisecond precision). */
  now: string;
  steps: Step[];
  /** The keepalive step's keep-alive interval. */
  keep_alive_ms: number;
  /** Where once's fn copies the claims it sees (see snapshot). */
  snapshots: string;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function failure(w: WireFailure | undefined): Failure {
  if (!w) throw new Error("step without a failure");
  const f: Failure = { code: w.code };
  if (w.detail !== undefined) f.detail = w.detail;
  if (w.completed_steps !== undefined) f.completedSteps = w.completed_steps;
  if (w.retryable !== undefined) f.retryable = w.retryable;
  if (w.tool_failure !== undefined) f.toolFailure = w.tool_failure;
  return f;
}

/**
 * snapshot is once's fn in both kits (internal/kitcompat's snapshot): it
 * copies the task's claim to the snapshots collection as it finds it and,
 * when renewed is set, waits until the claim has been renewed and copies it
 * again.
 */
async function snapshot(fs: Firestore, run: Run, id: string, renewed: boolean, signal: AbortSignal): Promise<void> {
  const doc = fs.collection("task-idempotency").doc(id);
  const snaps = fs.collection(run.snapshots);
  await snaps.doc(`${id}-claimed`).set((await doc.get()).data()!);
  while (renewed) {
    const cur = (await doc.get()).data()!;
    if (cur.renewed_at !== undefined) {
      await snaps.doc(`${id}-renewed`).set(cur);
      return;
    }
    signal.throwIfAborted();
    await new Promise((r) => setTimeout(r, run.keep_alive_ms / 4));
  }
}

/** A task to publish: payload in base64 (as Go's encoding/json writes bytes). */
interface Publish {
  subject: string;
  payload: string;
  headers: Record<string, string[]> | null;
}

/**
 * publishRun publishes each task with the predictions' pre-flight (the model
 * read once first), closes the kit (writing the counts) and prints what
 * publish answered per task.
 */
async function publishRun(run: Run & { publishes: Publish[] }, now: Date): Promise<void> {
  const nc = await connect({ servers: run.nats_url });
  const fs = new Firestore({ projectId: run.project });
  const kit = new Kit(nc, { firestore: fs, clock: () => now, predictions: { refreshMs: 3600_000 } });
  await kit.refreshPredictions();
  const out = [];
  for (const p of run.publishes) {
    try {
      const r = await kit.publish(p.subject, Buffer.from(p.payload, "base64"), p.headers ?? {});
      out.push({ stream: r.ack.stream, seq: r.ack.seq, duplicate: r.ack.duplicate, subject: r.subject, predicted: r.predicted, routed: r.routed });
    } catch (err) {
      out.push({ stream: "", seq: 0, duplicate: false, subject: "", predicted: false, routed: false,
        error: err instanceof Error ? err.message : String(err) });
    }
  }
  await kit.close();
  await nc.close();
  await fs.terminate();
  process.stdout.write(JSON.stringify({ published: out }) + "\n");
}

/** A triage agent's decision as the Go side writes agentkit.TriageRequest (payload in base64). */
interface Decision {
  answer: string;
  payload?: string;
  set_headers?: Record<string, string>;
  reason?: string;
}

/**
 * triageRun answers the next tasks of the consumer "ceo" with the kit's
 * handleTriage through the console's triage endpoint, deciding by entry id,
 * and prints each task's outcome by entry id.
 */
async function triageRun(run: Run & { console_url: string; token: string; tasks: number; decisions: Record<string, Decision> }): Promise<void> {
  const nc = await connect({ servers: run.nats_url });
  const kit = new Kit(nc, { agent: "ceo" });
  const client = new TriageClient(run.console_url, async () => run.token);
  const consumer = await jetstream(nc).consumers.get("TASKS", "ceo");
  const outcomes: Record<string, string> = {};
  for (let i = 0; i < run.tasks; i++) {
    const m = await consumer.next({ expires: 10_000 });
    if (!m) throw new Error(`no triage task ${i + 1}`);
    const got = await kit.handleTriage(m, client, async (task) => {
      const d = run.decisions[task.entry_id];
      if (!d) throw new Error(`no decision for ${task.entry_id}`);
      const a: TriageAnswer = { answer: d.answer };
      if (d.payload) a.payload = Buffer.from(d.payload, "base64");
      if (d.set_headers) a.setHeaders = d.set_headers;
      if (d.reason) a.reason = d.reason;
      return a;
    });
    outcomes[m.headers?.get("Jsdlq-Triage-Entry") ?? ""] = got.outcome;
  }
  await nc.flush();
  await nc.close();
  process.stdout.write(JSON.stringify({ outcomes }) + "\n");
}

async function main(): Promise<void> {
  const run = JSON.parse(await readStdin()) as Run;
  const now = new Date(run.now);
  if (Number.isNaN(now.getTime())) throw new Error(`now ${run.now} is not a time`);
  process.env.METADATA_SERVER_DETECTION ??= "none"; // the emulator: no metadata server to ask
  if (run.mode === "publish") return publishRun(run as Run & { publishes: Publish[] }, now);
  if (run.mode === "triage") return triageRun(run as Parameters<typeof triageRun>[0]);
  const nc = await connect({ servers: run.nats_url });
  const fs = new Firestore({ projectId: run.project });
  const kit = new Kit(nc, { agent: run.agent, firestore: fs, clock: () => now });
  const kept = new Kit(nc, { agent: run.agent, firestore: fs, clock: () => now, keepAliveMs: run.keep_alive_ms });
  const consumer = await jetstream(nc).consumers.get(run.stream, run.consumer);
  const results: { seq: number; error?: string; ran?: boolean }[] = [];
  for (const step of run.steps) {
    const m = await consumer.next({ expires: 5000 });
    if (!m) throw new Error(`no delivery for step ${results.length + 1}`);
    const r: { seq: number; error?: string; ran?: boolean } = { seq: m.info.streamSequence };
    try {
      switch (step.do) {
        case "terminate":
          await kit.terminate(m, failure(step.failure));
          break;
        case "fail":
          await kit.fail(m, failure(step.failure));
          break;
        case "once":
        case "keepalive": {
          const task = taskOf(m);
          const k = step.do === "keepalive" ? kept : kit;
          r.ran = await k.once(task, (signal) =>
            snapshot(fs, run, idempotencyDocID(task.tenant, task.key), step.do === "keepalive", signal));
          m.ack();
          break;
        }
        case "preflight":
          try {
            kit.preflight(new Budget(step.window ?? 0), step.prompt ?? "");
            m.ack();
          } catch (err) {
            if (!(err instanceof OverflowError)) throw err;
            await kit.terminate(m, err.failure());
          }
          break;
      }
    } catch (err) {
      r.error = err instanceof Error ? err.message : String(err);
    }
    results.push(r);
  }
  await nc.flush();
  await nc.close();
  await fs.terminate();
  process.stdout.write(JSON.stringify({ steps: results }) + "\n");
}

main().catch((err: unknown) => {
  process.stderr.write(`compat: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
