// The wire contract jsdlq reads from agents, as the Go kit writes it
// (docs/contracts.md): header and object names, the failure record, the DLQ
// record, and the JSON encoding of Go's encoding/json, byte for byte, so
// that a record or failure written by this kit is indistinguishable from
// one written by the Go kit.

import { headers as newHeaders, type MsgHdrs } from "@nats-io/transport-node";

/** Default names of the JetStream objects and the Firestore collection. */
export const DefaultWorkStream = "TASKS";
export const DefaultRecordStream = "DLQ_RECORDS";
export const DefaultFailureBucket = "dlq_failures";
export const DefaultIdempotencyCollection = "task-idempotency";
/** How long a completion record is kept (its expire_at), in milliseconds: 72 h. */
export const DefaultIdempotencyTTLMs = 72 * 60 * 60 * 1000;

/** The explicit DLQ record: schema, metadata header, escape prefix, subject. */
export const RecordSchema = "jsdlq.record.v1";
export const RecordHeader = "Jsdlq-Record";
export const OrigPrefix = "Jsdlq-Orig-";
export const RecordSubjectPrefix = "dlq.records";
export const MsgIdHeader = "Nats-Msg-Id";

/** Conventional task headers jsdlq reads. */
export const HeaderTaskID = "X-Task-ID";
export const HeaderIdempotencyKey = "X-Idempotency-Key";
export const HeaderTaskType = "X-Task-Type";
export const HeaderTenant = "X-Tenant-ID";
export const HeaderAgent = "X-Agent";
export const HeaderTaskVersion = "X-Task-Version";
/** The tenant of a task without X-Tenant-ID. */
export const DefaultTenant = "default";

/** Headers a replay sets; all begin with ReplayPrefix. */
export const ReplayPrefix = "Jsdlq-";
export const HeaderReplayOf = "Jsdlq-Replay-Of";
export const HeaderReplayAttempt = "Jsdlq-Replay-Attempt";
export const HeaderStrategy = "Jsdlq-Strategy";
export const HeaderInstruction = "Jsdlq-Instruction";
export const HeaderTargetModel = "Jsdlq-Target-Model";
export const HeaderMaxContextTokens = "Jsdlq-Max-Context-Tokens";
export const HeaderMaxOutputTokens = "Jsdlq-Max-Output-Tokens";
export const HeaderCompletedSteps = "Jsdlq-Completed-Steps";

/** Reason code the kit produces itself (the pre-flight). */
export const CodeContextWindowOverflow = "context_window_overflow";

/**
 * An agent's account of a failed attempt. The agent sets code (a reason code
 * of the taxonomy), detail, completedSteps (side effects already made),
 * toolFailure (a tool call, not the model, failed) and retryable (its own
 * view over the policy's); the kit fills attempt, agent and recordedAt.
 */
export interface Failure {
  code: string;
  detail?: string;
  attempt?: number;
  agent?: string;
  completedSteps?: string[];
  retryable?: boolean;
  toolFailure?: boolean;
  /** Nanoseconds since the Unix epoch. */
  recordedAt?: bigint;
}

/** The metadata of a DLQ record (the JSON of its Jsdlq-Record header). */
export interface RecordMeta {
  stream: string;
  /** A bigint for a sequence beyond 2^53 (a task publish routed to the DLQ). */
  streamSeq: number | bigint;
  consumer?: string;
  subject: string;
  /** Nanoseconds since the Unix epoch. */
  publishedAt: bigint;
  deliveries?: number;
  failure: Failure;
}

/** Headers as a plain map, name to values, as both kits read them. */
export type HeaderMap = Record<string, string[]>;

/** toHeaderMap converts nats.js headers (or a map already) to a HeaderMap. */
export function toHeaderMap(h: MsgHdrs | HeaderMap | undefined): HeaderMap {
  if (!h) return {};
  if (isMsgHdrs(h)) {
    const out: HeaderMap = {};
    for (const k of h.keys()) out[k] = h.values(k);
    return out;
  }
  return h;
}

function isMsgHdrs(h: MsgHdrs | HeaderMap): h is MsgHdrs {
  return typeof (h as MsgHdrs).keys === "function" && typeof (h as MsgHdrs).values === "function";
}

/** header returns the first value of name, matched case-insensitively (exact case first). */
export function header(h: HeaderMap, name: string): string {
  const exact = h[name];
  if (exact && exact.length > 0) return exact[0]!;
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(h)) {
    if (k.toLowerCase() === lower && v.length > 0) return v[0]!;
  }
  return "";
}

/** eventID is "<stream>.<seq>": the record's Nats-Msg-Id, the failure bucket key and the entry's event id. */
export function eventID(stream: string, seq: number | bigint): string {
  return `${stream}.${seq.toString()}`;
}

/** recordSubject is the subject a record of a message of stream is published to. */
export function recordSubject(stream: string): string {
  return `${RecordSubjectPrefix}.${stream}`;
}

// --- Go's encoding/json, for the values of the contract -------------------

const hex = "0123456789abcdef";

/**
 * goString encodes s as Go's json.Marshal does: HTML-safe (<, >, & as
 * \u003c…), U+2028 and U+2029 escaped, control characters as \b \f \n \r \t
 * or \u00XX, and what Go would see as invalid UTF-8 (a lone surrogate) as
 * \ufffd.
 */
export function goString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (c < 0x80) {
      switch (ch) {
        case '"':
          out += '\\"';
          continue;
        case "\\":
          out += "\\\\";
          continue;
        case "\b":
          out += "\\b";
          continue;
        case "\f":
          out += "\\f";
          continue;
        case "\n":
          out += "\\n";
          continue;
        case "\r":
          out += "\\r";
          continue;
        case "\t":
          out += "\\t";
          continue;
      }
      if (c < 0x20 || ch === "<" || ch === ">" || ch === "&") {
        out += "\\u00" + hex[c >> 4] + hex[c & 0xf];
      } else {
        out += ch;
      }
      continue;
    }
    if (c === 0x2028 || c === 0x2029) {
      out += "\\u202" + hex[c & 0xf];
    } else if (c >= 0xd800 && c <= 0xdfff) {
      out += "\\ufffd";
    } else {
      out += ch;
    }
  }
  return out + '"';
}

function goInt(n: number | bigint): string {
  if (typeof n === "bigint") return n.toString();
  if (!Number.isSafeInteger(n)) throw new RangeError(`agentkit: ${n} is not an integer`);
  return n.toString();
}

/**
 * formatTime formats nanoseconds since the epoch as Go marshals a UTC
 * time.Time: RFC 3339 with up to nine fraction digits, trailing zeros
 * dropped, "Z".
 */
export function formatTime(ns: bigint): string {
  let sec = ns / 1_000_000_000n;
  let frac = ns % 1_000_000_000n;
  if (frac < 0n) {
    frac += 1_000_000_000n;
    sec -= 1n;
  }
  const base = new Date(Number(sec) * 1000).toISOString().slice(0, 19);
  const digits = frac.toString().padStart(9, "0").replace(/0+$/, "");
  return base + (digits ? "." + digits : "") + "Z";
}

/** nanosOf converts a Date to nanoseconds since the epoch. */
export function nanosOf(d: Date): bigint {
  return BigInt(d.getTime()) * 1_000_000n;
}

/**
 * failureJSON is the failure record as JSON, field for field as Go writes
 * event.Failure (the value of the failure bucket, the "failure" of a record).
 */
export function failureJSON(f: Failure): string {
  let s = '{"code":' + goString(f.code);
  if (f.detail) s += ',"detail":' + goString(f.detail);
  if (f.attempt) s += ',"attempt":' + goInt(f.attempt);
  if (f.agent) s += ',"agent":' + goString(f.agent);
  if (f.completedSteps && f.completedSteps.length > 0) {
    s += ',"completed_steps":[' + f.completedSteps.map(goString).join(",") + "]";
  }
  if (f.retryable !== undefined && f.retryable !== null) s += ',"retryable":' + (f.retryable ? "true" : "false");
  if (f.toolFailure) s += ',"tool_failure":true';
  s += ',"recorded_at":"' + formatTime(f.recordedAt ?? -62135596800000000000n) + '"';
  return s + "}";
}

/** recordMetaJSON is the Jsdlq-Record header value, as Go writes event.RecordMeta. */
export function recordMetaJSON(m: RecordMeta): string {
  let s = '{"schema":' + goString(RecordSchema);
  s += ',"stream":' + goString(m.stream);
  s += ',"stream_seq":' + goInt(m.streamSeq);
  if (m.consumer) s += ',"consumer":' + goString(m.consumer);
  s += ',"subject":' + goString(m.subject);
  s += ',"published_at":"' + formatTime(m.publishedAt) + '"';
  if (m.deliveries) s += ',"deliveries":' + goInt(m.deliveries);
  s += ',"failure":' + failureJSON(m.failure);
  return s + "}";
}

function mustEscape(name: string): boolean {
  const l = name.toLowerCase();
  return l.startsWith("nats-") || l.startsWith(RecordHeader.toLowerCase()) || l.startsWith(OrigPrefix.toLowerCase());
}

/** InvalidRecordError: a record lacks what every record must carry. */
export class InvalidRecordError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidRecordError";
  }
}

/**
 * encodeRecord returns the headers of the record message of a message with
 * original headers orig: the originals (names JetStream or jsdlq would
 * interpret travel as Jsdlq-Orig-<name>), Jsdlq-Record with the metadata
 * and Nats-Msg-Id = <stream>.<seq>, so that JetStream drops a second copy.
 * The body of the record is the original payload, byte for byte.
 */
export function encodeRecord(meta: RecordMeta, orig: HeaderMap): MsgHdrs {
  if (!meta.stream || !meta.streamSeq || !meta.subject || !meta.failure.code) {
    throw new InvalidRecordError("agentkit: record needs stream, stream_seq, subject and failure.code");
  }
  const h = newHeaders();
  for (const [name, values] of Object.entries(orig)) {
    const n = mustEscape(name) ? OrigPrefix + name : name;
    for (const v of values) h.append(n, v);
  }
  h.set(RecordHeader, recordMetaJSON(meta));
  h.set(MsgIdHeader, eventID(meta.stream, meta.streamSeq));
  return h;
}

/** recordSize is the size of the record message as the server counts it against max_payload. */
export function recordSize(subject: string, h: MsgHdrs, data: Uint8Array): number {
  let n = data.length + utf8Length(subject) + "NATS/1.0\r\n\r\n".length;
  for (const k of h.keys()) {
    for (const v of h.values(k)) n += utf8Length(k) + utf8Length(v) + 4;
  }
  return n;
}

/** utf8Length is the length of s in UTF-8 bytes. */
export function utf8Length(s: string): number {
  return Buffer.byteLength(s, "utf8");
}
