// The Kit: what a TypeScript agent (a JetStream consumer of tasks on
// nats.js) uses to die well, with the behaviour of the Go kit
// (shared/agentkit):
//
//   - terminate copies the message and the failure to the DLQ record stream,
//     waits for JetStream to confirm the copy, and only then terminates the
//     message. On a WorkQueue or Interest stream a TERM deletes the message,
//     so the copy is the only place its payload survives.
//   - fail records why this delivery failed in the failure bucket and NAKs
//     with the delay the consumer's BackOff gives this delivery.
//   - once makes a task's side effects happen once across redeliveries and
//     replays, recording completion in Firestore before the ack.
//   - preflight refuses a model call that cannot fit the context window.
//
// Every method that fails leaves the message to be redelivered: nothing is
// terminated that was not copied first.

import { randomBytes } from "node:crypto";
import { Firestore, Timestamp, type DocumentReference } from "@google-cloud/firestore";
import { jetstream, type DeliveryInfo, type JetStreamClient, type JetStreamManager, type JsMsg } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";

import { Budget, fraction, type Estimate } from "./budget.js";
import {
  DefaultFailureBucket,
  DefaultIdempotencyCollection,
  DefaultIdempotencyTTLMs,
  DefaultLeaseMs,
  DefaultRecordStream,
  encodeRecord,
  eventID,
  failureJSON,
  nanosOf,
  recordSubject,
  toHeaderMap,
  utf8Length,
  type Failure,
} from "./contract.js";
import { fields, idempotencyDocID, idempotencyKey, legacyIdempotencyDocID, tenant, trimSpace } from "./replay.js";

/** Fields of a task-idempotency document: a claim or a completion. */
export const StatusInProgress = "in_progress";
export const StatusCompleted = "completed";

/**
 * A task for once and for the readers of its completion record (replay,
 * reconcile): its tenant and idempotency key. Two tenants' tasks with the
 * same key are two tasks, each with its own record.
 */
export interface Task {
  /** The message's tenant: X-Tenant-ID trimmed, "default" when absent (tenant(headers)). */
  tenant: string;
  /** The idempotency key (idempotencyKey(headers)). */
  key: string;
  /**
   * When the message was published to its stream, in nanoseconds since the
   * Unix epoch: a record an older kit wrote (no tenant) speaks for this
   * task only if written at or after it (recordFor). Absent: unknown, and
   * such records are not honoured.
   */
  publishedAt?: bigint;
}

/** taskOf is the task msg carries: tenant, idempotency key ("" when none) and publish time. */
export function taskOf(msg: JsMsg): Task {
  return { tenant: tenant(msg.headers), key: idempotencyKey(msg.headers), publishedAt: msg.timestampNanos };
}

/**
 * A task-idempotency/{idempotencyDocID(tenant, key)} document, or one an
 * older kit wrote at legacyIdempotencyDocID(key) (tenant absent).
 */
export interface IdempotencyRecord {
  key: string;
  tenant?: string;
  status: string;
  agent?: string;
  owner?: string;
  claimed_at?: Timestamp;
  lease_until?: Timestamp;
  completed_at?: Timestamp;
  /** Drives the collection's TTL policy: 72 h after completion or claim. */
  expire_at: Timestamp;
}

/** The record (payload plus headers) would exceed the server's max payload; the failure was recorded with fail and the message NAKed instead. */
export class RecordTooLargeError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RecordTooLargeError";
  }
}

/** Another worker holds the idempotency claim of the key: NAK with a delay. */
export class InProgressError extends Error {
  constructor(readonly key: string) {
    super(`key ${JSON.stringify(key)}: agentkit: task in progress elsewhere`);
    this.name = "InProgressError";
  }
}

/** once was given a task it cannot record: no tenant or key, text that is not well-formed, or spaces jsdlq trims away. */
export class InvalidTaskError extends Error {
  constructor(message: string) {
    super(`agentkit: invalid task: ${message}`);
    this.name = "InvalidTaskError";
  }
}

/** once needs a Firestore client (the firestore option). */
export class NoFirestoreError extends Error {
  constructor() {
    super("agentkit: once needs a Firestore client (the firestore option)");
    this.name = "NoFirestoreError";
  }
}

/** Where the kit logs what it cannot return (console works). */
export interface Logger {
  warn(message: string, attrs?: Record<string, unknown>): void;
}

/** Options of a Kit. */
export interface KitOptions {
  /** The agent's name in failure records. */
  agent?: string;
  /** Enables once. */
  firestore?: Firestore;
  /** The stream records must land in (default DLQ_RECORDS). */
  recordStream?: string;
  /** The failure bucket (default dlq_failures). */
  failureBucket?: string;
  /** once's collection (default task-idempotency). */
  idempotencyCollection?: string;
  /** How long a once claim blocks duplicates, ms (default 5 min); at least the consumer's ack wait. */
  leaseMs?: number;
  /**
   * Ends the window in which once also honours the records older kits wrote
   * under the key alone, with no tenant (default: no end). Set it once no
   * agent has run an older kit for 72 hours; a time in the past turns
   * them off.
   */
  legacyCompletionsUntil?: Date;
  /** Default: no logging. */
  logger?: Logger;
  /** The clock (tests). */
  clock?: () => Date;
  /** A JetStream client of nc with options of its own (a domain, an API prefix). */
  jetstream?: JetStreamClient;
}

interface ConsumerRetry {
  backoffNanos: number[];
  maxDeliver: number;
}

const silent: Logger = { warn() {} };
const encoder = new TextEncoder();
// Go's zero time.Time, as Firestore stores it.
const zeroSeconds = -62135596800;

/** Kit binds agentkit to a NATS connection and an agent name. */
export class Kit {
  readonly agent: string;
  readonly recordStream: string;
  readonly failureBucket: string;
  readonly idempotencyCollection: string;
  readonly leaseMs: number;
  readonly legacyCompletionsUntil: Date | undefined;
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly fs: Firestore | undefined;
  private readonly log: Logger;
  private readonly now: () => Date;
  private kv: Promise<KV> | undefined;
  private jsm: Promise<JetStreamManager> | undefined;
  private readonly consumers = new Map<string, ConsumerRetry>();

  constructor(nc: NatsConnection, opts: KitOptions = {}) {
    this.nc = nc;
    this.js = opts.jetstream ?? jetstream(nc);
    this.fs = opts.firestore;
    this.agent = opts.agent ?? "";
    this.recordStream = opts.recordStream ?? DefaultRecordStream;
    this.failureBucket = opts.failureBucket ?? DefaultFailureBucket;
    this.idempotencyCollection = opts.idempotencyCollection ?? DefaultIdempotencyCollection;
    this.leaseMs = opts.leaseMs ?? DefaultLeaseMs;
    this.legacyCompletionsUntil = opts.legacyCompletionsUntil;
    this.log = opts.logger ?? silent;
    this.now = opts.clock ?? (() => new Date());
  }

  private failure(info: DeliveryInfo, f: Failure): Failure {
    return { ...f, attempt: info.deliveryCount, agent: this.agent, recordedAt: nanosOf(this.now()) };
  }

  /**
   * terminate copies msg and f to the record stream (subject
   * dlq.records.<stream>, Nats-Msg-Id <stream>.<seq>, so a repeated
   * terminate of a redelivered message is deduplicated), waits for the
   * publish ack and then terminates msg with reason "<code>: <detail>". If
   * the copy fails the message is NAKed, not terminated, and the error
   * thrown: it will be redelivered and nothing is lost.
   */
  async terminate(msg: JsMsg, f: Failure): Promise<void> {
    if (!f.code) throw new Error("agentkit: terminate needs a failure code");
    const info = msg.info;
    const id = eventID(info.stream, info.streamSequence);
    const failure = this.failure(info, f);
    let h: MsgHdrs;
    try {
      h = encodeRecord({
        stream: info.stream, streamSeq: info.streamSequence, consumer: info.consumer, subject: msg.subject,
        publishedAt: msg.timestampNanos, deliveries: info.deliveryCount, failure,
      }, toHeaderMap(msg.headers));
    } catch (err) {
      await this.nakQuietly(msg);
      throw new Error(`agentkit: record ${id}: ${errMessage(err)}`, { cause: err });
    }
    const subject = recordSubject(info.stream);
    const limit = this.nc.info?.max_payload ?? 0;
    const size = recordSize(subject, h, msg.data);
    if (limit > 0 && size > limit) {
      let ferr: unknown;
      try {
        await this.fail(msg, f);
      } catch (err) {
        ferr = err;
      }
      throw new RecordTooLargeError(`agentkit: record exceeds the server's max payload: record ${id} is ${size} bytes, ` +
        `limit ${limit}; recorded and NAKed instead` + (ferr ? `; ${errMessage(ferr)}` : ""), { cause: ferr });
    }
    try {
      await this.js.publish(subject, msg.data, { headers: h, expect: { streamName: this.recordStream } });
    } catch (err) {
      await this.nakQuietly(msg);
      throw new Error(`agentkit: publish record ${id} to ${this.recordStream}: ${errMessage(err)} (message NAKed, not terminated)`,
        { cause: err });
    }
    try {
      msg.term(termReason(f));
    } catch (err) {
      // The record is safe; a redelivery terminates again and the record
      // stream deduplicates the second copy.
      throw new Error(`agentkit: term ${id} after recording it: ${errMessage(err)}`, { cause: err });
    }
  }

  private bucket(): Promise<KV> {
    if (!this.kv) {
      const p = new Kvm(this.js).open(this.failureBucket);
      this.kv = p;
      p.catch(() => {
        if (this.kv === p) this.kv = undefined; // try again on the next failure
      });
    }
    return this.kv;
  }

  /**
   * fail records f for this delivery in the failure bucket (key
   * <stream>.<seq>) and NAKs msg with the delay the consumer's BackOff gives
   * this delivery. The record is written before the NAK so that it is in
   * place when the last NAK exhausts MaxDeliver. A failed write still NAKs;
   * the error is thrown after.
   */
  async fail(msg: JsMsg, f: Failure): Promise<void> {
    const info = msg.info;
    const id = eventID(info.stream, info.streamSequence);
    const errs: Error[] = [];
    if (!f.code) {
      errs.push(new Error("agentkit: fail needs a failure code"));
    } else {
      try {
        const kv = await this.bucket();
        await kv.put(id, encoder.encode(failureJSON(this.failure(info, f))));
      } catch (err) {
        errs.push(new Error(`agentkit: record failure of ${id} in ${this.failureBucket}: ${errMessage(err)}`, { cause: err }));
      }
    }
    try {
      await this.nak(msg);
    } catch (err) {
      errs.push(new Error(`agentkit: nak ${id}: ${errMessage(err)}`, { cause: err }));
    }
    throwAll(errs);
  }

  /**
   * backoffMs is the NAK delay for a delivery: the consumer's BackOff entry
   * for it (the last entry beyond the list), and none on the last allowed
   * delivery, whose NAK only ends the message (the server then sends the max
   * deliveries advisory; waiting would just delay it).
   */
  async backoffMs(info: DeliveryInfo): Promise<number> {
    const key = `${info.stream}/${info.consumer}`;
    let r = this.consumers.get(key);
    if (!r) {
      try {
        if (!this.jsm) this.jsm = this.js.jetstreamManager();
        const ci = await (await this.jsm).consumers.info(info.stream, info.consumer);
        r = { backoffNanos: (ci.config.backoff ?? []).map(Number), maxDeliver: ci.config.max_deliver ?? 0 };
        this.consumers.set(key, r);
      } catch (err) {
        this.jsm = undefined;
        this.log.warn("consumer info unavailable; NAK without delay",
          { stream: info.stream, consumer: info.consumer, error: errMessage(err) });
        return 0;
      }
    }
    const n = info.deliveryCount;
    if (r.backoffNanos.length === 0 || n === 0 || (r.maxDeliver > 0 && n >= r.maxDeliver)) return 0;
    return r.backoffNanos[Math.min(n - 1, r.backoffNanos.length - 1)]! / 1e6;
  }

  private async nak(msg: JsMsg): Promise<void> {
    const d = await this.backoffMs(msg.info);
    if (d > 0) msg.nak(d);
    else msg.nak();
  }

  private async nakQuietly(msg: JsMsg): Promise<void> {
    try {
      await this.nak(msg);
    } catch (err) {
      this.log.warn("nak failed; the message is redelivered after its ack wait", { error: errMessage(err) });
    }
  }

  /** preflight is budget.check that logs a warning above the warn fraction. */
  preflight(budget: Budget, ...parts: string[]): Estimate {
    const e = budget.check(...parts);
    if (e.warn) {
      this.log.warn("prompt close to the context window",
        { tokens: e.tokens, max_tokens: e.maxTokens, fraction: fraction(e).toFixed(2) });
    }
    return e;
  }

  /**
   * once runs fn at most once per task (tenant and key) across redeliveries,
   * replays and concurrent duplicates, and resolves to whether it ran:
   *
   *   - completed before: fn does not run; false — ack the message;
   *   - claimed by another live attempt: throws InProgressError — NAK with
   *     a delay and let the redelivery find it completed;
   *   - otherwise it claims the task in a transaction (create if absent or
   *     take over an expired claim), runs fn, and records completion
   *     (completed_at, expire_at = +72 h) before resolving to true: ack
   *     after that.
   *
   * Get the task from the message with taskOf. Two tenants' tasks with the
   * same key each run. While the migration window lasts
   * (legacyCompletionsUntil), a completion or live claim an older kit
   * recorded under the key alone counts too, when recordFor says it speaks
   * for the task.
   *
   * If fn throws, the claim is released and fn's error rethrown; the next
   * delivery runs fn again. fn can run twice for one task only when the
   * process dies (or loses Firestore) between fn's side effects and the
   * completion write and a redelivery comes after the lease, or when fn runs
   * longer than the lease: size leaseMs above the longest fn.
   */
  async once(task: Task, fn: () => Promise<void>): Promise<boolean> {
    const fs = this.fs;
    if (!fs) throw new NoFirestoreError();
    checkTask(task);
    const coll = fs.collection(this.idempotencyCollection);
    const ref = coll.doc(idempotencyDocID(task.tenant, task.key));
    const refs = [ref];
    if (legacyCompletionsOn(this.legacyCompletionsUntil, this.now())) refs.push(coll.doc(legacyIdempotencyDocID(task.key)));
    const owner = randomBytes(8).toString("hex");
    const name = `tenant ${JSON.stringify(task.tenant)} key ${JSON.stringify(task.key)}`;
    let done = false;
    try {
      await fs.runTransaction(async (tx) => {
        done = false;
        const now = this.now();
        const snaps = await tx.getAll(...refs);
        for (const snap of snaps) {
          if (!snap.exists) continue;
          const cur = snap.data() as Partial<IdempotencyRecord>;
          if (!recordFor(cur, task)) continue;
          if (completed(cur)) {
            done = true;
            return;
          }
          if (cur.lease_until instanceof Timestamp && cur.lease_until.toMillis() > now.getTime()) {
            throw new InProgressError(task.key);
          }
        }
        tx.set(ref, this.doc(task, StatusInProgress, owner, {
          claimed_at: Timestamp.fromDate(now),
          lease_until: Timestamp.fromMillis(now.getTime() + this.leaseMs),
          expire_at: Timestamp.fromMillis(now.getTime() + DefaultIdempotencyTTLMs),
        }));
      });
    } catch (err) {
      if (err instanceof InProgressError) throw err;
      throw new Error(`agentkit: claim ${name}: ${errMessage(err)}`, { cause: err });
    }
    if (done) return false;
    try {
      await fn();
    } catch (err) {
      try {
        await this.release(fs, ref, owner);
      } catch (rerr) {
        this.log.warn("could not release idempotency claim; it expires with its lease",
          { tenant: task.tenant, key: task.key, error: errMessage(rerr) });
      }
      throw err;
    }
    const now = this.now();
    try {
      await ref.set(this.doc(task, StatusCompleted, owner, {
        completed_at: Timestamp.fromDate(now),
        expire_at: Timestamp.fromMillis(now.getTime() + DefaultIdempotencyTTLMs),
      }));
    } catch (err) {
      throw new Error(`agentkit: record completion of ${name} (do not ack; the claim expires in ` +
        `${this.leaseMs} ms): ${errMessage(err)}`, { cause: err });
    }
    return true;
  }

  // doc is an idempotency document as the Go kit writes it: agent and owner
  // left out when empty.
  private doc(task: Task, status: string, owner: string,
    times: Pick<IdempotencyRecord, "expire_at" | "claimed_at" | "lease_until" | "completed_at">): IdempotencyRecord {
    const d: IdempotencyRecord = { key: task.key, tenant: task.tenant, status, ...times };
    if (this.agent) d.agent = this.agent;
    if (owner) d.owner = owner;
    return d;
  }

  // release deletes the claim if it is still ours.
  private async release(fs: Firestore, ref: DocumentReference, owner: string): Promise<void> {
    await fs.runTransaction(async (tx) => {
      const snap = await tx.get(ref);
      if (!snap.exists) return;
      const cur = snap.data() as Partial<IdempotencyRecord>;
      if (cur.owner !== owner || cur.status !== StatusInProgress) return;
      tx.delete(ref);
    });
  }
}

function isZero(t: unknown): t is undefined {
  return !(t instanceof Timestamp) || (t.seconds === zeroSeconds && t.nanoseconds === 0);
}

function completed(r: Partial<IdempotencyRecord>): boolean {
  return r.status === StatusCompleted || !isZero(r.completed_at);
}

function nanosOfTimestamp(t: Timestamp): bigint {
  return BigInt(t.seconds) * 1_000_000_000n + BigInt(t.nanoseconds);
}

/**
 * recordFor reports whether r speaks for task. A record of this kit does
 * when it names the task's tenant and key. A record an older kit wrote names
 * no tenant, so any tenant's task with the key may have written it; it
 * speaks for the task only when written (completed, or else claimed) at or
 * after the task was published: one written before belongs to another
 * task. The Go kit and the server decide alike (IdempotencyRecord.For).
 */
export function recordFor(r: Partial<IdempotencyRecord>, task: Task): boolean {
  if (r.key !== task.key) return false;
  if (r.tenant) return r.tenant === task.tenant;
  const written = !isZero(r.completed_at) ? r.completed_at : r.claimed_at;
  return task.publishedAt !== undefined && task.publishedAt > 0n && !isZero(written) &&
    nanosOfTimestamp(written as Timestamp) >= task.publishedAt;
}

/** legacyCompletionsOn reports whether older kits' records are read at now, the window ending at until. */
export function legacyCompletionsOn(until: Date | undefined, now: Date): boolean {
  return until === undefined || now.getTime() < until.getTime();
}

// A UTF-16 surrogate without its pair: text no UTF-8 encoding can carry.
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

// checkTask refuses a task whose record jsdlq would never find: the readers
// name the task as the headers give it, trimmed and never empty.
function checkTask(task: Task): void {
  for (const [name, v] of [["tenant", task.tenant], ["key", task.key]] as const) {
    if (!v) throw new InvalidTaskError(`no ${name} (taskOf reads it from the message)`);
    if (loneSurrogate.test(v)) throw new InvalidTaskError(`${name} ${JSON.stringify(v)} is not well-formed Unicode`);
    if (trimSpace(v) !== v) throw new InvalidTaskError(`${name} ${JSON.stringify(v)} has leading or trailing space, which jsdlq trims`);
  }
}

/**
 * termReason is "<code>: <detail>" on one line, at most 256 bytes. A cut
 * inside a character leaves one U+FFFD per cut-off byte, as the server
 * reports the Go kit's cut in the advisory.
 */
export function termReason(f: Failure): string {
  let r = f.code;
  const d = fields(f.detail ?? "").join(" ");
  if (d) r += ": " + d;
  const b = Buffer.from(r, "utf8");
  if (b.length <= 256) return r;
  let end = 256;
  while (end > 0 && (b[end]! & 0xc0) === 0x80) end--; // the start of the cut character
  return b.subarray(0, end).toString("utf8") + "\ufffd".repeat(256 - end);
}

/** recordSize is the size of the record message as the server counts it against max_payload. */
export function recordSize(subject: string, h: MsgHdrs, data: Uint8Array): number {
  let n = data.length + utf8Length(subject) + "NATS/1.0\r\n\r\n".length;
  for (const k of h.keys()) {
    for (const v of h.values(k)) n += utf8Length(k) + utf8Length(v) + 4;
  }
  return n;
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function throwAll(errs: Error[]): void {
  if (errs.length === 1) throw errs[0];
  if (errs.length > 1) throw new AggregateError(errs, errs.map((e) => e.message).join("; "));
}
