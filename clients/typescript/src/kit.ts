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

import type { Firestore } from "@google-cloud/firestore";
import { jetstream, type DeliveryInfo, type JetStreamClient, type JetStreamManager, type JsMsg } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";

import { Budget, fraction, type Estimate } from "./budget.js";
import { checkTask, Claim, InProgressError, legacyCompletionsOn, type Task } from "./claim.js";
import {
  DefaultFailureBucket,
  DefaultIdempotencyCollection,
  DefaultRecordStream,
  encodeRecord,
  eventID,
  failureJSON,
  nanosOf,
  recordSize,
  recordSubject,
  toHeaderMap,
  DefaultWorkStream,
  type Failure,
  type HeaderMap,
} from "./contract.js";
import { ackDeadlineNanos, ClaimLostError, DefaultKeepAliveMs, keepAliveRun, LeaseIntervals, type ConsumerTiming } from "./keepalive.js";
import { DefaultCountFlushMs, DefaultPredictionsRefreshMs, Publisher, type Published } from "./publish.js";
import { fields, idempotencyDocID, legacyIdempotencyDocID } from "./replay.js";
import {
  BadAnswerError, checkAnswer, triageActor, TriageDecidedError, TriageNotFoundError, triageOf, TriageRefusedError, TriageUnfinishedError,
  type Answerer, type Decide, type TriageAnswer, type TriageOutcome, type TriageTask,
} from "./triage.js";

/** The record (payload plus headers) would exceed the server's max payload; the failure was recorded with fail and the message NAKed instead. */
export class RecordTooLargeError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RecordTooLargeError";
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
  /**
   * How often a running task is kept alive (in-progress ack and claim
   * renewal), ms. Default: half the delivery's ack deadline (its
   * consumer's AckWait, or its BackOff entry for the delivery), read once
   * per consumer; DefaultKeepAliveMs when that cannot be read or once has
   * no delivery.
   */
  keepAliveMs?: number;
  /**
   * Overrides how long a once claim blocks duplicates without a renewal,
   * ms. Default: LeaseIntervals keep-alive intervals (the claim is renewed
   * every interval while fn runs, so the lease only bounds how long a
   * worker that died holds the task).
   */
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
  /**
   * Turns publish's pre-flight on (docs/predictions.md): the model is read
   * every refreshMs (default 5 min) with the work stream's pending tasks,
   * and the tasks published are counted for the learner. Needs firestore.
   */
  predictions?: { refreshMs?: number };
  /** How often the pre-flight writes its task counts, ms (default one minute); close writes the rest. */
  countFlushMs?: number;
  /** The stream publish publishes tasks to (default TASKS); a task routed to the DLQ is recorded as a task of it. */
  workStream?: string;
}

const silent: Logger = { warn() {} };
const encoder = new TextEncoder();

/** Kit binds agentkit to a NATS connection and an agent name. */
export class Kit {
  readonly agent: string;
  readonly recordStream: string;
  readonly failureBucket: string;
  readonly idempotencyCollection: string;
  readonly keepAliveMs: number | undefined;
  readonly leaseMs: number | undefined;
  readonly legacyCompletionsUntil: Date | undefined;
  private readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly fs: Firestore | undefined;
  private readonly log: Logger;
  private readonly now: () => Date;
  private kv: Promise<KV> | undefined;
  private jsm: Promise<JetStreamManager> | undefined;
  private readonly consumers = new Map<string, ConsumerTiming>();
  private readonly publisher: Publisher;

  constructor(nc: NatsConnection, opts: KitOptions = {}) {
    this.nc = nc;
    this.js = opts.jetstream ?? jetstream(nc);
    this.fs = opts.firestore;
    this.agent = opts.agent ?? "";
    this.recordStream = opts.recordStream ?? DefaultRecordStream;
    this.failureBucket = opts.failureBucket ?? DefaultFailureBucket;
    this.idempotencyCollection = opts.idempotencyCollection ?? DefaultIdempotencyCollection;
    this.keepAliveMs = opts.keepAliveMs;
    this.leaseMs = opts.leaseMs;
    this.legacyCompletionsUntil = opts.legacyCompletionsUntil;
    this.log = opts.logger ?? silent;
    this.now = opts.clock ?? (() => new Date());
    this.publisher = new Publisher({
      js: this.js, jsm: () => this.manager(), maxPayload: () => this.nc.info?.max_payload ?? 0, fs: this.fs,
      recordStream: this.recordStream, workStream: opts.workStream ?? DefaultWorkStream,
      refreshMs: opts.predictions ? (opts.predictions.refreshMs ?? DefaultPredictionsRefreshMs) : undefined,
      countFlushMs: opts.countFlushMs ?? DefaultCountFlushMs, now: this.now, warn: (m, a) => this.log.warn(m, a),
    });
  }

  // manager is the JetStream manager, made once (again after a failure).
  private manager(): Promise<JetStreamManager> {
    if (!this.jsm) {
      const p = this.js.jetstreamManager();
      this.jsm = p;
      p.catch(() => {
        if (this.jsm === p) this.jsm = undefined;
      });
    }
    return this.jsm;
  }

  /**
   * publish publishes a task (payload and headers) to subject on the work
   * stream and waits for the ack. A task with an idempotency key is
   * published with Nats-Msg-Id = idempotencyDocID(tenant, key) unless the
   * caller set one: a retry of the publish within the work stream's
   * duplicate window is dropped by JetStream (one task), while two tenants'
   * tasks with one key are two tasks. A task without a key gets no
   * Nats-Msg-Id: every publish of it is a new task.
   *
   * With the predictions option (as the Go kit's Publish):
   *
   *   - no prediction: published as it is, marked counted (Jsdlq-Counted)
   *     and with the agent's pending tasks (Jsdlq-Pending), and counted;
   *   - an advisory prediction: the same, plus the Jsdlq-Predicted-* headers;
   *   - action strategy: the strategy's Jsdlq-* headers (as a replay would
   *     carry them, to the other agent's subject if it names one) and the
   *     Jsdlq-Predicted-* headers; not counted;
   *   - action dlq: the full task is recorded on the DLQ record stream
   *     (reason predicted_failure), acknowledged there, never published to
   *     the work stream; a record the server cannot take (too large) is
   *     published to the work stream instead: no prediction drops a task.
   *
   * Jsdlq-* headers the caller passes are then dropped: they are jsdlq's.
   */
  publish(subject: string, payload: Uint8Array | string, headers?: MsgHdrs | HeaderMap): Promise<Published> {
    return this.publisher.publish(subject, typeof payload === "string" ? encoder.encode(payload) : payload, headers);
  }

  /**
   * refreshPredictions reads the model and the work stream's pending tasks
   * now (the timer does every refreshMs). On an error the last model read
   * stays in use: publishing never waits for it.
   */
  refreshPredictions(): Promise<void> {
    return this.publisher.refresh();
  }

  /** flushCounts writes the task counts kept since the last flush (the timer does every countFlushMs). */
  flushCounts(): Promise<void> {
    return this.publisher.flush();
  }

  /** close stops the pre-flight's timers and writes the counts not yet written. */
  close(): Promise<void> {
    return this.publisher.close();
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
    const r = await this.consumer(info);
    const n = info.deliveryCount;
    if (!r || r.backoffNanos.length === 0 || n === 0 || (r.maxDeliver > 0 && n >= r.maxDeliver)) return 0;
    return r.backoffNanos[Math.min(n - 1, r.backoffNanos.length - 1)]! / 1e6;
  }

  // consumer is the configuration of the delivery's consumer, read once per
  // consumer; undefined when it cannot be read (logged).
  private async consumer(info: DeliveryInfo): Promise<ConsumerTiming | undefined> {
    const key = `${info.stream}/${info.consumer}`;
    let r = this.consumers.get(key);
    if (r) return r;
    try {
      const ci = await (await this.manager()).consumers.info(info.stream, info.consumer);
      r = { backoffNanos: (ci.config.backoff ?? []).map(Number), maxDeliver: ci.config.max_deliver ?? 0,
        ackWaitNanos: Number(ci.config.ack_wait ?? 0) };
      this.consumers.set(key, r);
      return r;
    } catch (err) {
      this.log.warn("consumer info unavailable; NAK without delay, keep-alive at the default interval",
        { stream: info.stream, consumer: info.consumer, error: errMessage(err) });
      return undefined;
    }
  }

  // intervalNanos is the keep-alive interval of msg's delivery (keepAliveMs).
  private async intervalNanos(msg: JsMsg | undefined): Promise<bigint> {
    if (this.keepAliveMs !== undefined && this.keepAliveMs > 0) return BigInt(Math.round(this.keepAliveMs * 1e6));
    const fallback = BigInt(DefaultKeepAliveMs) * 1_000_000n;
    if (!msg) return fallback;
    const r = await this.consumer(msg.info);
    if (!r) return fallback;
    const d = ackDeadlineNanos(r, msg.info.deliveryCount) / 2n;
    return d > 0n ? d : fallback;
  }

  // leaseNanos is the lease of a claim kept alive every interval: leaseMs,
  // else LeaseIntervals intervals.
  private leaseNanos(intervalNanos: bigint): bigint {
    if (this.leaseMs !== undefined && this.leaseMs > 0) return BigInt(Math.round(this.leaseMs * 1e6));
    return BigInt(LeaseIntervals) * intervalNanos;
  }

  /**
   * keepAlive runs fn while keeping msg alive: an in-progress ack every
   * keep-alive interval, so a task that outlives its consumer's AckWait is
   * not redelivered mid-work. It resolves or rejects as fn does; settling
   * msg is the caller's. once does this itself (with claim renewal) for a
   * task from taskOf. Bound fn yourself: the keep-alive lasts as long as fn
   * does, and a task that hangs is never redelivered.
   */
  async keepAlive<T>(msg: JsMsg, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    return keepAliveRun(await this.intervalNanos(msg), msg, undefined, (m, a) => this.log.warn(m, a), fn);
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

  /**
   * answer applies a to task's entry through answerer, as this kit's agent
   * (the task's triage agent when the kit has no name).
   */
  async answer(answerer: Answerer, task: TriageTask, a: TriageAnswer): Promise<string> {
    checkAnswer(a, task);
    return answerer.answerTriage(task, a, triageActor(this.agent || task.agent || "ceo"));
  }

  /**
   * handleTriage answers one triage task message and settles it, as the Go
   * kit's HandleTriage:
   *
   *   - a malformed task is terminated through terminate (schema_invalid),
   *     so it is recorded like any dead task and a person sees it;
   *   - decide runs kept alive (keepAlive); its error NAKs the message with
   *     the consumer's backoff;
   *   - the answer goes through answerer (TriageClient); applied (or found
   *     decided already: a redelivered task, a person who answered first)
   *     it is acked; refused for good it is acked too, the entry staying
   *     with the people its notification reached; a failure a retry can
   *     help NAKs.
   *
   * error says what went wrong when the outcome is not "answered" (an
   * answer recorded whose replay task was left to reconcile is "answered"
   * with a TriageUnfinishedError).
   */
  async handleTriage(msg: JsMsg, answerer: Answerer, decide: Decide): Promise<{ outcome: TriageOutcome; error?: unknown }> {
    let task: TriageTask;
    try {
      task = triageOf(msg);
    } catch (err) {
      try {
        await this.terminate(msg, { code: "schema_invalid", detail: errMessage(err) });
      } catch (terr) {
        return { outcome: "malformed", error: new AggregateError([err, terr], `${errMessage(err)}; ${errMessage(terr)}`) };
      }
      return { outcome: "malformed", error: err };
    }
    let a: TriageAnswer;
    try {
      // A decision may take a model longer than the consumer's AckWait.
      a = await this.keepAlive(msg, (signal) => decide(task, signal));
    } catch (err) {
      await this.nakQuietly(msg);
      return { outcome: "retry", error: new Error(`agentkit: decide on entry ${task.entry_id}: ${errMessage(err)}`, { cause: err }) };
    }
    try {
      await this.answer(answerer, task, a);
      msg.ack();
      return { outcome: "answered" };
    } catch (err) {
      if (err instanceof TriageUnfinishedError) {
        msg.ack();
        return { outcome: "answered", error: err };
      }
      if (err instanceof TriageDecidedError) {
        msg.ack();
        return { outcome: "already_decided", error: err };
      }
      if (err instanceof BadAnswerError || err instanceof TriageRefusedError || err instanceof TriageNotFoundError) {
        msg.ack();
        return { outcome: "refused", error: err };
      }
      await this.nakQuietly(msg);
      return { outcome: "retry", error: err };
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
   *     take over an expired claim), runs fn while keeping it alive, and
   *     records completion (completed_at, expire_at = +72 h) in a
   *     transaction that checks the claim is still this attempt's, before
   *     resolving to true: ack after that.
   *
   * While fn runs, one timer every keep-alive interval (keepAliveMs: by
   * default half the delivery's ack deadline) sends task.msg's in-progress
   * ack, so the server does not redeliver a task that outlives its AckWait,
   * and renews the claim's lease (LeaseIntervals intervals, or leaseMs) in a
   * transaction that checks the claim is still this attempt's. A renewal
   * that finds the claim taken over or completed by another attempt, or that
   * has failed until the lease ran out, aborts fn's signal and once rejects
   * with ClaimLostError: nothing is recorded, and the message must be
   * neither acked nor NAKed (ClaimLostError says why).
   *
   * Get the task from the message with taskOf. Two tenants' tasks with the
   * same key each run. While the migration window lasts
   * (legacyCompletionsUntil), a completion or live claim an older kit
   * recorded under the key alone counts too, when recordFor says it speaks
   * for the task.
   *
   * If fn throws, the claim is released and the error rethrown; the next
   * delivery runs fn again. A task longer than the lease no longer runs
   * twice: its claim is renewed as long as fn runs. fn can run twice for one
   * task only when the process dies (or loses Firestore for the whole
   * lease) between fn's side effects and the completion write: the claim
   * then lapses and a redelivery runs fn again.
   */
  async once(task: Task, fn: (signal: AbortSignal) => Promise<void>): Promise<boolean> {
    const fs = this.fs;
    if (!fs) throw new NoFirestoreError();
    checkTask(task);
    const coll = fs.collection(this.idempotencyCollection);
    const interval = await this.intervalNanos(task.msg);
    const claim = new Claim({
      fs, task, agent: this.agent, leaseNanos: this.leaseNanos(interval), now: this.now,
      ref: coll.doc(idempotencyDocID(task.tenant, task.key)),
      legacy: legacyCompletionsOn(this.legacyCompletionsUntil, this.now()) ? coll.doc(legacyIdempotencyDocID(task.key)) : undefined,
    });
    const name = `tenant ${JSON.stringify(task.tenant)} key ${JSON.stringify(task.key)}`;
    let done: boolean;
    try {
      done = await claim.take();
    } catch (err) {
      if (err instanceof InProgressError) throw err;
      throw new Error(`agentkit: claim ${name}: ${errMessage(err)}`, { cause: err });
    }
    if (done) return false;
    const warn = (m: string, a: Record<string, unknown>) => this.log.warn(m, { tenant: task.tenant, key: task.key, ...a });
    try {
      await keepAliveRun(interval, task.msg, () => claim.renew(), warn, fn);
    } catch (err) {
      if (err instanceof ClaimLostError) throw err;
      try {
        await claim.release();
      } catch (rerr) {
        warn("could not release idempotency claim; it expires with its lease", { error: errMessage(rerr) });
      }
      throw err;
    }
    try {
      await claim.complete();
    } catch (err) {
      if (err instanceof ClaimLostError) throw err;
      throw new Error(`agentkit: record completion of ${name} (do not ack; the claim expires in ` +
        `${claim.leaseNanos / 1_000_000n} ms): ${errMessage(err)}`, { cause: err });
    }
    return true;
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

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function throwAll(errs: Error[]): void {
  if (errs.length === 1) throw errs[0];
  if (errs.length > 1) throw new AggregateError(errs, errs.map((e) => e.message).join("; "));
}
