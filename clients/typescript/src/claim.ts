// once's claim on a task, as the Go kit makes it (shared/agentkit/once.go):
// the task-idempotency document of a tenant's task, claimed in a
// transaction, renewed while the work runs, and completed or released only
// while it is still this attempt's. Both kits write the same fields with the
// same lease arithmetic (internal/kitcompat compares them).

import { randomBytes } from "node:crypto";
import { Timestamp, type DocumentReference, type Firestore, type Transaction } from "@google-cloud/firestore";
import type { JsMsg } from "@nats-io/jetstream";

import { DefaultIdempotencyTTLMs } from "./contract.js";
import { ClaimLostError } from "./keepalive.js";
import { idempotencyKey, tenant, trimSpace } from "./replay.js";

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
  /**
   * The delivery once keeps alive while fn runs (in-progress acks at the
   * keep-alive interval); absent: once renews the claim only.
   */
  msg?: JsMsg;
}

/** taskOf is the task msg carries: tenant, idempotency key ("" when none), publish time and msg itself, to keep alive. */
export function taskOf(msg: JsMsg): Task {
  return { tenant: tenant(msg.headers), key: idempotencyKey(msg.headers), publishedAt: msg.timestampNanos, msg };
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
  /** The claim's last renewal (absent until the first). */
  renewed_at?: Timestamp;
  completed_at?: Timestamp;
  /** Drives the collection's TTL policy: 72 h after completion or the claim's last renewal. */
  expire_at: Timestamp;
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

// Go's zero time.Time, as Firestore stores it.
const zeroSeconds = -62135596800;
const nanosPerSecond = 1_000_000_000n;
const ttlNanos = BigInt(DefaultIdempotencyTTLMs) * 1_000_000n;

function isZero(t: unknown): t is undefined {
  return !(t instanceof Timestamp) || (t.seconds === zeroSeconds && t.nanoseconds === 0);
}

/** completed reports whether r says the task is done: an in-progress claim is not. */
export function completed(r: Partial<IdempotencyRecord>): boolean {
  return r.status === StatusCompleted || !isZero(r.completed_at);
}

function nanosOfTimestamp(t: Timestamp): bigint {
  return BigInt(t.seconds) * nanosPerSecond + BigInt(t.nanoseconds);
}

/** timestampOf is the Firestore timestamp of ns nanoseconds since the epoch. */
function timestampOf(ns: bigint): Timestamp {
  let s = ns / nanosPerSecond;
  let n = ns % nanosPerSecond;
  if (n < 0n) {
    n += nanosPerSecond;
    s -= 1n;
  }
  return new Timestamp(Number(s), Number(n));
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

/**
 * checkTask refuses a task whose record jsdlq would never find: the readers
 * name the task as the headers give it, trimmed and never empty.
 */
export function checkTask(task: Task): void {
  for (const [name, v] of [["tenant", task.tenant], ["key", task.key]] as const) {
    if (!v) throw new InvalidTaskError(`no ${name} (taskOf reads it from the message)`);
    if (loneSurrogate.test(v)) throw new InvalidTaskError(`${name} ${JSON.stringify(v)} is not well-formed Unicode`);
    if (trimSpace(v) !== v) throw new InvalidTaskError(`${name} ${JSON.stringify(v)} has leading or trailing space, which jsdlq trims`);
  }
}

/** What a Claim needs of its kit. */
export interface ClaimOptions {
  fs: Firestore;
  ref: DocumentReference;
  /** The record of an older kit to honour too (the migration window), if any. */
  legacy?: DocumentReference;
  task: Task;
  agent: string;
  leaseNanos: bigint;
  /** The kit's clock. */
  now: () => Date;
}

/** One attempt's claim on a task: the record it wrote. */
export class Claim {
  readonly owner = randomBytes(8).toString("hex");
  private claimedAt = 0n;
  private leaseUntil = 0n;

  constructor(private readonly o: ClaimOptions) {}

  /** The claim's lease, in nanoseconds. */
  get leaseNanos(): bigint {
    return this.o.leaseNanos;
  }

  private nowNanos(): bigint {
    return BigInt(this.o.now().getTime()) * 1_000_000n;
  }

  // doc is an idempotency document as the Go kit writes it: agent and
  // owner left out when empty, only the times given.
  private doc(status: string, times: Pick<IdempotencyRecord, "expire_at" | "claimed_at" | "lease_until" | "renewed_at" | "completed_at">):
    IdempotencyRecord {
    const d: IdempotencyRecord = { key: this.o.task.key, tenant: this.o.task.tenant, status, ...times };
    if (this.o.agent) d.agent = this.o.agent;
    d.owner = this.owner;
    return d;
  }

  /**
   * take claims the task in a transaction (create if absent or take over an
   * expired claim) and resolves to false, or to true when it is completed
   * already; it throws InProgressError while another attempt holds a live
   * claim.
   */
  async take(): Promise<boolean> {
    const refs = this.o.legacy ? [this.o.ref, this.o.legacy] : [this.o.ref];
    let done = false;
    await this.o.fs.runTransaction(async (tx) => {
      done = false;
      const now = this.nowNanos();
      const snaps = await tx.getAll(...refs);
      for (const snap of snaps) {
        if (!snap.exists) continue;
        const cur = snap.data() as Partial<IdempotencyRecord>;
        if (!recordFor(cur, this.o.task)) continue;
        if (completed(cur)) {
          done = true;
          return;
        }
        if (cur.lease_until instanceof Timestamp && nanosOfTimestamp(cur.lease_until) > now) {
          throw new InProgressError(this.o.task.key);
        }
      }
      this.claimedAt = now;
      this.leaseUntil = now + this.o.leaseNanos;
      tx.set(this.o.ref, this.doc(StatusInProgress, {
        claimed_at: timestampOf(now), lease_until: timestampOf(this.leaseUntil), expire_at: timestampOf(now + ttlNanos),
      }));
    });
    return done;
  }

  // mine reads the record in tx and throws ClaimLostError unless it is
  // still this attempt's live claim.
  private async mine(tx: Transaction): Promise<void> {
    const snap = await tx.get(this.o.ref);
    if (!snap.exists) throw new ClaimLostError("its record is gone");
    const cur = snap.data() as Partial<IdempotencyRecord>;
    if (completed(cur)) throw new ClaimLostError(`completed by owner ${cur.owner ?? ""}`);
    if (cur.owner !== this.owner) throw new ClaimLostError(`claimed by owner ${cur.owner ?? ""}`);
  }

  /**
   * renew extends the claim's lease by its lease from now, in a transaction
   * that checks it is still this attempt's. A renewal that fails otherwise
   * is a ClaimLostError once the lease it last wrote has passed: a duplicate
   * may have taken the task over since.
   */
  async renew(): Promise<void> {
    let leaseUntil = 0n;
    try {
      await this.o.fs.runTransaction(async (tx) => {
        await this.mine(tx);
        const now = this.nowNanos();
        leaseUntil = now + this.o.leaseNanos;
        tx.set(this.o.ref, this.doc(StatusInProgress, {
          claimed_at: timestampOf(this.claimedAt), lease_until: timestampOf(leaseUntil), renewed_at: timestampOf(now),
          expire_at: timestampOf(now + ttlNanos),
        }));
      });
    } catch (err) {
      if (err instanceof ClaimLostError) throw err;
      if (this.nowNanos() >= this.leaseUntil) {
        throw new ClaimLostError(`not renewed before its lease ended at ${timestampOf(this.leaseUntil).toDate().toISOString()}: ` +
          (err instanceof Error ? err.message : String(err)), { cause: err });
      }
      throw err;
    }
    this.leaseUntil = leaseUntil;
  }

  /**
   * complete records the task completed, in a transaction that checks the
   * claim is still this attempt's: a worker whose claim was lost never
   * records a completion over the winner's claim.
   */
  async complete(): Promise<void> {
    await this.o.fs.runTransaction(async (tx) => {
      await this.mine(tx);
      const now = this.nowNanos();
      tx.set(this.o.ref, this.doc(StatusCompleted, { completed_at: timestampOf(now), expire_at: timestampOf(now + ttlNanos) }));
    });
  }

  /** release deletes the claim if it is still ours. */
  async release(): Promise<void> {
    await this.o.fs.runTransaction(async (tx) => {
      try {
        await this.mine(tx);
      } catch (err) {
        if (err instanceof ClaimLostError) return; // not ours any more: nothing to release
        throw err;
      }
      tx.delete(this.o.ref);
    });
  }
}
