// Reading what a replay asks of the agent (the Jsdlq-* headers the replay
// function sets) and the task's idempotency key, as the Go kit reads them.

import { createHash } from "node:crypto";
import {
  HeaderCompletedSteps,
  HeaderIdempotencyKey,
  HeaderInstruction,
  HeaderMaxContextTokens,
  HeaderMaxOutputTokens,
  HeaderReplayAttempt,
  HeaderReplayOf,
  HeaderStrategy,
  HeaderTargetModel,
  HeaderTaskID,
  HeaderTaskVersion,
  HeaderTenant,
  DefaultTenant,
  header,
  toHeaderMap,
  utf8Length,
  type HeaderMap,
} from "./contract.js";
import type { MsgHdrs } from "@nats-io/transport-node";

/** What a replay's Jsdlq-* headers tell the agent. */
export interface Replay {
  /** The entry this message replays; "" for a first attempt. */
  of: string;
  attempt: number;
  strategy: string;
  instructions: string[];
  targetModel: string;
  maxContextTokens: number;
  maxOutputTokens: number;
  /** Steps the failed attempt already made; skip them. */
  completedSteps: string[];
  /** Whether the headers named a replayed entry. */
  isReplay: boolean;
}

// Go's strings.TrimSpace: Unicode White_Space (JavaScript's trim also
// strips U+FEFF and keeps U+0085).
const space = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const trimRe = new RegExp(`^[${space}]+|[${space}]+$`, "g");

/** trimSpace is Go's strings.TrimSpace. */
export function trimSpace(s: string): string {
  return s.replace(trimRe, "");
}

/** fields is Go's strings.Fields. */
export function fields(s: string): string[] {
  return s.split(new RegExp(`[${space}]+`)).filter((f) => f !== "");
}

const maxInt64 = 9223372036854775807n;

// positive reads a header number as Go's strconv.Atoi does; malformed,
// negative or out of range reads as 0.
function positive(s: string): number {
  if (!/^[+-]?[0-9]+$/.test(s)) return 0;
  const n = BigInt(s);
  if (n < 0n || n > maxInt64) return 0;
  return Number(n);
}

type SetReplay = (r: Replay, first: string, vs: string[]) => void;

// What each Jsdlq-* header sets: its first value (trimmed), that value as a
// number, or all its values.
const replaySetters: [string, SetReplay][] = [
  [HeaderReplayOf, (r, first) => { r.of = first; }],
  [HeaderReplayAttempt, (r, first) => { r.attempt = positive(first); }],
  [HeaderStrategy, (r, first) => { r.strategy = first; }],
  [HeaderInstruction, (r, _, vs) => { r.instructions.push(...vs); }],
  [HeaderTargetModel, (r, first) => { r.targetModel = first; }],
  [HeaderMaxContextTokens, (r, first) => { r.maxContextTokens = positive(first); }],
  [HeaderMaxOutputTokens, (r, first) => { r.maxOutputTokens = positive(first); }],
  [HeaderCompletedSteps, (r, _, vs) => { r.completedSteps.push(...vs); }],
];

// replayFields looks the setters up by lower-cased header name (names match
// in any case, as Go's strings.EqualFold compares them).
const replayFields = new Map(replaySetters.map(([name, set]) => [name.toLowerCase(), set]));

/**
 * parseReplay reads the Jsdlq-* headers (names in any case). Malformed
 * numbers read as 0: the replay is still processed, without the limit.
 */
export function parseReplay(hdrs: MsgHdrs | HeaderMap | undefined): Replay {
  const h = toHeaderMap(hdrs);
  const r: Replay = {
    of: "", attempt: 0, strategy: "", instructions: [], targetModel: "",
    maxContextTokens: 0, maxOutputTokens: 0, completedSteps: [], isReplay: false,
  };
  for (const [name, vs] of Object.entries(h)) {
    const set = replayFields.get(name.toLowerCase());
    if (set && vs.length > 0) set(r, trimSpace(vs[0]!), vs);
  }
  r.isReplay = r.of !== "";
  return r;
}

/** replayOf reads what a replay asks of the agent from a message. */
export function replayOf(msg: { headers?: MsgHdrs | undefined }): Replay {
  return parseReplay(msg.headers);
}

/**
 * idempotencyKey is the key jsdlq records a task's completion under:
 * X-Idempotency-Key, else "<X-Task-ID>-<X-Task-Version>", else the task id,
 * else "" (the task has no key: once cannot protect it).
 */
export function idempotencyKey(hdrs: MsgHdrs | HeaderMap | undefined): string {
  const h = toHeaderMap(hdrs);
  const k = trimSpace(header(h, HeaderIdempotencyKey));
  if (k) return k;
  const id = trimSpace(header(h, HeaderTaskID));
  if (!id) return "";
  const v = trimSpace(header(h, HeaderTaskVersion));
  return v ? `${id}-${v}` : id;
}

/** tenant is the task's tenant as jsdlq reads it: X-Tenant-ID trimmed, else "default". */
export function tenant(hdrs: MsgHdrs | HeaderMap | undefined): string {
  return trimSpace(header(toHeaderMap(hdrs), HeaderTenant)) || DefaultTenant;
}

/**
 * idempotencyDocID is the id of the completion record of tenant's task with
 * key: "tenant-sha256-" and the hex SHA-256 of the tenant's length in UTF-8
 * bytes (decimal), ":", the tenant and the key. The length prefix makes it
 * injective, the hash a valid Firestore id of fixed length, and the prefix
 * keeps it apart from the ids of older kits. The Go kit, replay and
 * reconcile compute the same id.
 */
export function idempotencyDocID(tenant: string, key: string): string {
  return "tenant-sha256-" + createHash("sha256").update(`${utf8Length(tenant)}:${tenant}${key}`, "utf8").digest("hex");
}

/**
 * legacyIdempotencyDocID is the id older kits gave the record of key, for
 * any tenant: the key itself when it is a valid Firestore id, else
 * "sha256-<hex of the key>" (keys with "/", "." or "..", __x__, empty or
 * over 1 500 bytes). Read while the migration window lasts; never written.
 */
export function legacyIdempotencyDocID(key: string): string {
  if (key !== "" && key !== "." && key !== ".." && !key.includes("/") && utf8Length(key) <= 1500 &&
    !(key.startsWith("__") && key.endsWith("__"))) {
    return key;
  }
  return "sha256-" + createHash("sha256").update(key, "utf8").digest("hex");
}
