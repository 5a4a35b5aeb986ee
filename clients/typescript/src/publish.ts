// The producer's side, as the Go kit's Kit.Publish (shared/agentkit/
// publish.go; docs/predictions.md): publish a task to the work stream with
// a Nats-Msg-Id from its tenant and idempotency key and, with predictions
// on, the pre-flight first: count the task in its feature buckets (in
// memory, written as blind increments on a timer) and look it up in the
// cached model (read on a timer), which may apply the policy's strategy
// before the first attempt or route the task to the DLQ at once. No
// Firestore read or write is made per task; a model that cannot be read
// only means tasks are published without predictions.

import { randomBytes } from "node:crypto";
import { FieldValue, Timestamp, type Firestore } from "@google-cloud/firestore";
import type { JetStreamClient, JetStreamManager, PubAck } from "@nats-io/jetstream";
import { headers as newHeaders, type MsgHdrs } from "@nats-io/transport-node";

import { encodeRecord, header, MsgIdHeader, nanosOf, recordSize, recordSubject, toHeaderMap, type HeaderMap } from "./contract.js";
import {
  ActionDLQ, ActionStrategy, AgentSubjectPrefix, agentOf, countsDocID, CountsCollection, CountsRetentionMs, featuresOf, goFixed2,
  HeaderCounted, HeaderPending, HeaderPredictedProbability, HeaderPredictedReason, HeaderPredictedVersion, keys, keyString,
  ModelCollection, ModelDoc, modelOf, parseSubject, ReasonPredictedFailure, reassign, setReplayHeaders, Table, taskSubject,
  type Features, type Prediction,
} from "./predict.js";
import { idempotencyDocID, idempotencyKey, tenant } from "./replay.js";

/** How often the pre-flight writes its task counts by default, ms. */
export const DefaultCountFlushMs = 60_000;
/** How often the pre-flight reads the model by default, ms. */
export const DefaultPredictionsRefreshMs = 5 * 60_000;

/** What publish did with a task. */
export interface Published {
  /** The work stream's ack, or the record stream's when the task was routed to the DLQ. */
  ack: PubAck;
  /** The subject published to (another agent's when the strategy hands the task over; the record subject when routed). */
  subject: string;
  /** The model's row for the task, when predicted. */
  prediction?: Prediction;
  predicted: boolean;
  /** The task went to the DLQ (reason predicted_failure) instead of the work stream. */
  routed: boolean;
}

/** The record of a task routed to the DLQ would exceed the server's max payload: it is published to run instead. */
class RouteTooLarge extends Error {}

/** What a Publisher needs of its kit. */
export interface PublisherOptions {
  js: JetStreamClient;
  jsm: () => Promise<JetStreamManager>;
  maxPayload: () => number;
  fs: Firestore | undefined;
  recordStream: string;
  workStream: string;
  /** Predictions on: the model's refresh interval, ms (undefined: off). */
  refreshMs: number | undefined;
  countFlushMs: number;
  now: () => Date;
  warn: (message: string, attrs?: Record<string, unknown>) => void;
}

/** Publisher publishes tasks, with the predictions' pre-flight when it is on. */
export class Publisher {
  private table: Table | undefined;
  private pending: Map<string, bigint> | undefined;
  // counts: "<agent>\0<hour ms>" → cell → tasks.
  private counts = new Map<string, { agent: string; hour: Date; cells: Map<string, number> }>();
  private timers: NodeJS.Timeout[] = [];
  // Refreshes run one after another (a slow one never lands after a later
  // one); the first, started by the constructor, comes before any the
  // caller asks for, like the Go kit's.
  private refreshes: Promise<void> = Promise.resolve();
  // asked: predictions were asked for (jsdlq's own headers are dropped);
  // on: and can be read.
  private readonly asked: boolean;
  private readonly on: boolean;

  constructor(private readonly o: PublisherOptions) {
    this.asked = o.refreshMs !== undefined;
    this.on = this.asked && o.fs !== undefined;
    if (o.refreshMs !== undefined && !o.fs) o.warn("agentkit: predictions without a Firestore client; publish publishes without predictions");
    if (!this.on) return;
    void this.refresh().catch(() => {});
    this.timers.push(setInterval(() => void this.refresh().catch(() => {}), o.refreshMs));
    this.timers.push(setInterval(() => {
      this.flush().catch((err: unknown) => o.warn("prediction counts not written; kept for the next flush", { error: String(err) }));
    }, o.countFlushMs));
    for (const t of this.timers) t.unref();
  }

  /**
   * refresh reads the model and the work stream's pending tasks per agent
   * now. On an error the last model read stays in use (none before the
   * first): publishing never waits for it.
   */
  refresh(): Promise<void> {
    const run = this.refreshes.then(() => this.readPredictions());
    this.refreshes = run.catch(() => {});
    return run;
  }

  private async readPredictions(): Promise<void> {
    const fs = this.o.fs;
    if (!this.on || !fs) throw new Error("agentkit: predictions need the predictions option and a Firestore client");
    const errs: string[] = [];
    try {
      const snap = await fs.collection(ModelCollection).doc(ModelDoc).get();
      this.table = new Table(snap.exists ? modelOf(snap.data()!) : { version: 0, predictions: [] });
    } catch (err) {
      errs.push(err instanceof Error ? err.message : String(err));
    }
    try {
      const info = await (await this.o.jsm()).streams.info(this.o.workStream, { subjects_filter: `${AgentSubjectPrefix}.*.tasks.>` });
      const pending = new Map<string, bigint>();
      for (const [subject, n] of Object.entries(info.state.subjects ?? {})) {
        const s = parseSubject(subject);
        if (s) pending.set(s.agent, (pending.get(s.agent) ?? 0n) + BigInt(n));
      }
      this.pending = pending;
    } catch (err) {
      errs.push(`agentkit: pending tasks of ${this.o.workStream}: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (errs.length > 0) {
      this.o.warn("predictions not refreshed; publishing with the last ones read", { error: errs.join("; ") });
      throw new Error(errs.join("; "));
    }
  }

  /**
   * flush writes the counts kept since the last flush: one write per agent
   * and hour, blind increments (no read). Counts that could not be written
   * are kept for the next flush.
   */
  async flush(): Promise<void> {
    const fs = this.o.fs;
    if (!this.on || !fs) return;
    const batch = this.counts;
    this.counts = new Map();
    const errs: string[] = [];
    for (const [k, d] of batch) {
      const cells: Record<string, FieldValue> = {};
      for (const [key, n] of d.cells) cells[key] = FieldValue.increment(n);
      const ref = fs.collection(CountsCollection).doc(countsDocID(d.agent, d.hour));
      try {
        await ref.set({ agent: d.agent, hour: Timestamp.fromDate(d.hour), cells,
          expire_at: Timestamp.fromMillis(d.hour.getTime() + CountsRetentionMs) }, { merge: true });
      } catch (err) {
        errs.push(`agentkit: write ${CountsCollection}/${ref.id}: ${err instanceof Error ? err.message : String(err)}`);
        const cur = this.counts.get(k) ?? { agent: d.agent, hour: d.hour, cells: new Map<string, number>() };
        for (const [key, n] of d.cells) cur.cells.set(key, (cur.cells.get(key) ?? 0) + n);
        this.counts.set(k, cur);
      }
    }
    if (errs.length > 0) throw new Error(errs.join("; "));
  }

  /** close stops the timers and writes the counts not yet written. */
  async close(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await this.flush();
  }

  private count(f: Features, at: Date): void {
    const hour = new Date(Math.floor(at.getTime() / 3600_000) * 3600_000);
    const k = `${f.agent}\0${hour.getTime()}`;
    const d = this.counts.get(k) ?? { agent: f.agent, hour, cells: new Map<string, number>() };
    for (const key of keys(f)) {
      const s = keyString(key);
      d.cells.set(s, (d.cells.get(s) ?? 0) + 1);
    }
    this.counts.set(k, d);
  }

  /** publish: see Kit.publish. */
  async publish(subject: string, payload: Uint8Array, given: MsgHdrs | HeaderMap | undefined): Promise<Published> {
    const h: HeaderMap = {};
    for (const [name, vs] of Object.entries(toHeaderMap(given))) {
      if (!this.asked || !name.toLowerCase().startsWith("jsdlq-")) h[name] = [...vs];
    }
    setMsgID(h);
    if (!this.on) {
      const ack = await this.send(subject, payload, h, false);
      return { ack, subject, predicted: false, routed: false };
    }
    const now = this.o.now();
    const msg = { subject };
    const out = this.predict(msg, h, payload, now);
    if (out.route) {
      try {
        return await this.routeToDLQ(msg.subject, h, payload, out.prediction!, now);
      } catch (err) {
        if (!(err instanceof RouteTooLarge)) throw err;
        this.o.warn("task predicted to fail is too large to record; published to run instead", { subject, error: err.message });
      }
    }
    const ack = await this.send(msg.subject, payload, h, true);
    return { ack, subject: msg.subject, prediction: out.prediction, predicted: out.prediction !== undefined, routed: false };
  }

  private async send(subject: string, payload: Uint8Array, h: HeaderMap, expect: boolean): Promise<PubAck> {
    try {
      return await this.o.js.publish(subject, payload, { headers: toMsgHdrs(h), ...(expect ? { expect: { streamName: this.o.workStream } } : {}) });
    } catch (err) {
      throw new Error(`agentkit: publish to ${subject}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  // predict marks, treats or counts the task (changing its headers and
  // subject) and reports whether it is to be routed to the DLQ.
  private predict(msg: { subject: string }, h: HeaderMap, payload: Uint8Array, now: Date): { prediction?: Prediction; route: boolean } {
    if (this.pending) h[HeaderPending] = [String(this.pending.get(agentOf(msg.subject, h)) ?? 0n)];
    const f = featuresOf(msg.subject, h, payload.length, now);
    // One table for the whole task: a refresh landing meanwhile must not
    // mark the task with another model's version.
    const table = this.table;
    const p = table?.lookup(f);
    const version = table?.model.version ?? 0;
    if (p && p.action === ActionDLQ) {
      delete h[HeaderPending];
      markPredicted(h, p, version);
      return { prediction: p, route: true };
    }
    if (p && p.action === ActionStrategy) {
      setReplayHeaders(h, p.replay);
      markPredicted(h, p, version);
      if (p.alternateAgent !== "" && p.alternateAgent !== f.agent) {
        msg.subject = taskSubject(p.alternateAgent, f.taskType);
        reassign(h, p.alternateAgent);
      }
      return { prediction: p, route: false };
    }
    if (p) markPredicted(h, p, version);
    if (f.agent !== "") {
      h[HeaderCounted] = ["1"];
      this.count(f, now);
    }
    return { prediction: p, route: false };
  }

  // routeToDLQ records the task on the record stream as a dead task of the
  // work stream with reason predicted_failure, and waits for the ack.
  private async routeToDLQ(subject: string, h: HeaderMap, payload: Uint8Array, p: Prediction, now: Date): Promise<Published> {
    const seq = predictedSeq(tenant(h), idempotencyKey(h));
    const detail = `predicted ${p.reason} with probability ${goFixed2(p.probability)} (at least ${goFixed2(p.confidence)}): ` +
      `${p.deaths} of ${p.tasks} tasks of ${p.agent}/${p.taskType} with ${p.feature} ${p.bucket} died, ` +
      `model version ${h[HeaderPredictedVersion]?.[0] ?? ""}`;
    const rh = encodeRecord({
      stream: this.o.workStream, streamSeq: seq, subject, publishedAt: nanosOf(now),
      failure: { code: ReasonPredictedFailure, detail, agent: p.agent, recordedAt: nanosOf(now) },
    }, h);
    const rs = recordSubject(this.o.workStream);
    const limit = this.o.maxPayload();
    const size = recordSize(rs, rh, payload);
    if (limit > 0 && size > limit) throw new RouteTooLarge(`agentkit: record exceeds the server's max payload: ${size} bytes, limit ${limit}`);
    let ack: PubAck;
    try {
      ack = await this.o.js.publish(rs, payload, { headers: rh, expect: { streamName: this.o.recordStream } });
    } catch (err) {
      throw new Error(`agentkit: record predicted failure of ${subject} on ${this.o.recordStream}: ` +
        `${err instanceof Error ? err.message : String(err)} (not published)`, { cause: err });
    }
    return { ack, subject: rs, prediction: p, predicted: true, routed: true };
  }
}

function markPredicted(h: HeaderMap, p: Prediction, version: number): void {
  h[HeaderPredictedReason] = [p.reason];
  h[HeaderPredictedProbability] = [goFixed2(p.probability)];
  h[HeaderPredictedVersion] = [String(version)];
}

/**
 * setMsgID sets h's Nats-Msg-Id from the task's tenant and idempotency key
 * (idempotencyDocID(tenant, key)), unless h has one or the task has no key.
 */
export function setMsgID(h: HeaderMap): void {
  if (header(h, MsgIdHeader) !== "") return;
  const key = idempotencyKey(h);
  if (key !== "") h[MsgIdHeader] = [idempotencyDocID(tenant(h), key)];
}

const fnvOffset = 0xcbf29ce484222325n;
const fnvPrime = 0x100000001b3n;
const mask64 = (1n << 64n) - 1n;

/**
 * predictedSeq is the stream sequence a task routed to the DLQ is recorded
 * under: at least 2^62 (a sequence no stream reaches), 62 bits of the
 * FNV-1a hash of idempotencyDocID(tenant, key), so a second publish of the
 * task is deduplicated and two tenants' tasks with one key are two records;
 * random for a task without a key.
 */
export function predictedSeq(tenantName: string, key: string): bigint {
  let v: bigint;
  if (key !== "") {
    v = fnvOffset;
    for (const b of Buffer.from(idempotencyDocID(tenantName, key), "utf8")) v = ((v ^ BigInt(b)) * fnvPrime) & mask64;
  } else {
    v = randomBytes(8).readBigUInt64BE();
  }
  return (1n << 62n) | (v & ((1n << 62n) - 1n));
}

function toMsgHdrs(h: HeaderMap): MsgHdrs {
  const out = newHeaders();
  for (const [k, vs] of Object.entries(h)) for (const v of vs) out.append(k, v);
  return out;
}
