// The predictions as publish reads them (docs/predictions.md), as the Go kit
// and shared/predict compute them: a task's features and feature buckets,
// the cells it counts in, the model document the learner writes, and which
// of its rows applies to a task. Pure: no I/O.

import { createHash } from "node:crypto";
import type { DocumentData } from "@google-cloud/firestore";

import { header, HeaderAgent, HeaderTaskType, type HeaderMap } from "./contract.js";
import { trimSpace, type Replay } from "./replay.js";

/** The Firestore documents of the predictions. */
export const ModelCollection = "dlq-predictions";
export const ModelDoc = "current";
export const CountsCollection = "dlq-predict-counts";
/** How long a counts document is kept after its hour, in milliseconds (3 days). */
export const CountsRetentionMs = 3 * 24 * 3600_000;

/** The reason code of a task a prediction sent to the DLQ before its first attempt. */
export const ReasonPredictedFailure = "predicted_failure";
/** What the policy does with a predicted task: apply a strategy, or route it to the DLQ. */
export const ActionStrategy = "strategy";
export const ActionDLQ = "dlq";

/** Headers publish sets before a task's first attempt (jsdlq's; a replay never carries them). */
export const HeaderPredictedReason = "Jsdlq-Predicted-Reason";
export const HeaderPredictedProbability = "Jsdlq-Predicted-Probability";
export const HeaderPredictedVersion = "Jsdlq-Predicted-Version";
export const HeaderCounted = "Jsdlq-Counted";
export const HeaderPending = "Jsdlq-Pending";
/** A publisher's estimate of the tokens a task needs (optional). */
export const HeaderEstimatedTokens = "X-Estimated-Tokens";

/** The agent token begins a task subject: "<prefix>.<agent>.tasks.<type>". */
export const AgentSubjectPrefix = "agents";

/** parseSubject reads a task subject by the grammar; undefined when it does not follow it. */
export function parseSubject(subject: string): { agent: string; taskType: string } | undefined {
  const t = subject.split(".");
  if (t.length < 3 || t[0] !== AgentSubjectPrefix || t[1] === "" || t[2] !== "tasks") return undefined;
  return { agent: t[1]!, taskType: t.slice(3).join(".") };
}

/** taskSubject is the subject of a task of taskType for agent. */
export function taskSubject(agent: string, taskType: string): string {
  return `${AgentSubjectPrefix}.${agent}.tasks.${taskType}`;
}

/** agentOf is a task's agent: X-Agent trimmed, else the subject's agent token, else "". */
export function agentOf(subject: string, h: HeaderMap): string {
  return trimSpace(header(h, HeaderAgent)) || (parseSubject(subject)?.agent ?? "");
}

/** taskTypeOf is a task's type: X-Task-Type trimmed, else the subject's type, else "". */
export function taskTypeOf(subject: string, h: HeaderMap): string {
  return trimSpace(header(h, HeaderTaskType)) || (parseSubject(subject)?.taskType ?? "");
}

/** Features of a task known before its first attempt. */
export interface Features {
  agent: string;
  taskType: string;
  payloadBytes: number;
  /** The publisher's token estimate; 0 when it gave none. */
  estTokens: number;
  /** The UTC hour of day (0-23) it was published. */
  hour: number;
  /** The agent's tasks waiting in the work stream at publish, when known. */
  pending?: bigint;
}

/** A cell of the statistics: a bucket of one feature of one agent's tasks of one type. */
export interface Key {
  agent: string;
  taskType: string;
  feature: string;
  bucket: string;
}

/** parseCount reads a non-negative header count as Go's strconv.ParseUint(s, 10, 63); undefined for anything else. */
export function parseCount(s: string): bigint | undefined {
  const t = trimSpace(s);
  if (!/^[0-9]+$/.test(t)) return undefined;
  const n = BigInt(t);
  return n < 1n << 63n ? n : undefined;
}

/** featuresOf reads a task's features from its message, as the learner reads a dead task's. */
export function featuresOf(subject: string, h: HeaderMap, payloadBytes: number, publishedAt: Date): Features {
  const f: Features = { agent: agentOf(subject, h), taskType: taskTypeOf(subject, h), payloadBytes, estTokens: 0,
    hour: publishedAt.getUTCHours() };
  const est = parseCount(header(h, HeaderEstimatedTokens));
  if (est !== undefined && est < 1n << 31n) f.estTokens = Number(est);
  f.pending = parseCount(header(h, HeaderPending));
  return f;
}

type Bound = [below: number, name: string];

function bucketOf(bounds: Bound[], n: number, beyond: string): string {
  for (const [below, name] of bounds) if (n < below) return name;
  return beyond;
}

const sizeBounds: Bound[] = [[1 << 10, "0-1KiB"], [4 << 10, "1-4KiB"], [16 << 10, "4-16KiB"], [64 << 10, "16-64KiB"],
  [256 << 10, "64-256KiB"], [1 << 20, "256KiB-1MiB"]];
const tokenBounds: Bound[] = [[2_000, "0-2k"], [8_000, "2k-8k"], [32_000, "8k-32k"], [128_000, "32k-128k"], [200_000, "128k-200k"]];

/** sizeBucket is the size bucket of a payload of n bytes. */
export function sizeBucket(n: number): string {
  return bucketOf(sizeBounds, n, "1MiB+");
}

/** tokenBucket is the bucket of an estimate of n tokens. */
export function tokenBucket(n: number): string {
  return bucketOf(tokenBounds, n, "200k+");
}

/** hourBucket is the four-hour block of the UTC hour h ("08-11"). */
export function hourBucket(h: number): string {
  h = ((h % 24) + 24) % 24;
  const from = Math.floor(h / 4) * 4;
  return `${String(from).padStart(2, "0")}-${String(from + 3).padStart(2, "0")}`;
}

/** loadBucket is the decade of the agent's pending tasks. */
export function loadBucket(pending: bigint): string {
  if (pending < 10n) return "0-9";
  if (pending < 100n) return "10-99";
  if (pending < 1000n) return "100-999";
  return "1000+";
}

/** keys are the cells a task with features f counts in (none without an agent). */
export function keys(f: Features): Key[] {
  if (!f.agent) return [];
  const k = (feature: string, bucket: string): Key => ({ agent: f.agent, taskType: f.taskType, feature, bucket });
  const out = [k("all", "all"), k("size", sizeBucket(f.payloadBytes)), k("hour", hourBucket(f.hour))];
  if (f.estTokens > 0) out.push(k("tokens", tokenBucket(f.estTokens)));
  if (f.pending !== undefined) out.push(k("load", loadBucket(f.pending)));
  return out;
}

// Go's url.PathEscape keeps these besides letters and digits.
const pathSafe = /[A-Za-z0-9\-_.~$&+:=@]/;

/** goPathEscape is Go's url.PathEscape: a path segment, UTF-8 bytes as %XX otherwise. */
export function goPathEscape(s: string): string {
  let out = "";
  for (const ch of s) {
    if (ch.length === 1 && pathSafe.test(ch)) {
      out += ch;
      continue;
    }
    for (const b of Buffer.from(ch, "utf8")) out += "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/** keyString encodes a cell as "<agent>/<type>/<feature>/<bucket>", each part path-escaped. */
export function keyString(k: Key): string {
  return [k.agent, k.taskType, k.feature, k.bucket].map(goPathEscape).join("/");
}

/** countsDocID is the id of the counts document of agent in the UTC hour: "<yyyymmddhh>-<agent>". */
export function countsDocID(agent: string, hour: Date): string {
  let a = goPathEscape(agent);
  if (a.length > 1000) a = "sha256-" + createHash("sha256").update(agent, "utf8").digest("hex");
  const iso = hour.toISOString();
  return iso.slice(0, 4) + iso.slice(5, 7) + iso.slice(8, 10) + iso.slice(11, 13) + "-" + a;
}

/** What a strategy's Jsdlq-* headers carry: a Replay without its verdict. */
export type ReplayHeaders = Omit<Replay, "isReplay">;

/** One row of the model: tasks of agent and type in a feature's bucket die with probability, mostly of reason. */
export interface Prediction extends Key {
  tasks: number;
  deaths: number;
  probability: number;
  confidence: number;
  reason: string;
  reasonShare: number;
  /** ActionStrategy, ActionDLQ or "" (advisory). */
  action: string;
  strategy: string;
  replay: ReplayHeaders;
  alternateAgent: string;
}

/** The learnt model (dlq-predictions/current). */
export interface Model {
  version: number;
  predictions: Prediction[];
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

function num(v: unknown): number {
  return typeof v === "number" ? v : 0;
}

function strs(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((s): s is string => typeof s === "string") : [];
}

/** ModelError: the model document is not one the learner writes. */
export class ModelError extends Error {
  constructor(message: string) {
    super(`agentkit: decode prediction model: ${message}`);
    this.name = "ModelError";
  }
}

/**
 * modelOf reads the model document as the Go learner writes predict.Model
 * (the row's cell flattened into it, its replay headers under their Go
 * field names).
 */
export function modelOf(d: DocumentData): Model {
  if (typeof d.version !== "number" || !Number.isInteger(d.version)) throw new ModelError(`version ${JSON.stringify(d.version)} is not a number`);
  const rows = d.predictions ?? [];
  if (!Array.isArray(rows)) throw new ModelError("predictions is not a list");
  return {
    version: d.version,
    predictions: rows.map((r: DocumentData): Prediction => {
      const rp = (r.replay ?? {}) as DocumentData;
      return {
        agent: str(r.agent), taskType: str(r.task_type), feature: str(r.feature), bucket: str(r.bucket),
        tasks: num(r.tasks), deaths: num(r.deaths), probability: num(r.probability), confidence: num(r.confidence),
        reason: str(r.reason), reasonShare: num(r.reason_share), action: str(r.action), strategy: str(r.strategy),
        alternateAgent: str(r.alternate_agent),
        replay: { of: str(rp.Of), attempt: num(rp.Attempt), strategy: str(rp.Strategy), instructions: strs(rp.Instructions),
          targetModel: str(rp.TargetModel), maxContextTokens: num(rp.MaxContextTokens), maxOutputTokens: num(rp.MaxOutputTokens),
          completedSteps: strs(rp.CompletedSteps) },
      };
    }),
  };
}

/** Table is a model indexed by agent and type, for lookup per task. */
export class Table {
  private readonly rows = new Map<string, Prediction[]>();
  constructor(readonly model: Model) {
    for (const p of model.predictions) {
      const k = JSON.stringify([p.agent, p.taskType]);
      this.rows.set(k, [...(this.rows.get(k) ?? []), p]);
    }
  }

  /**
   * lookup is the row that applies to a task with features f: of the rows of
   * its agent and type whose bucket is one of the task's, an acted-on row
   * before an advisory one, then the highest confidence (ties: the first in
   * the model's order).
   */
  lookup(f: Features): Prediction | undefined {
    const ks = keys(f).map(keyString);
    let best: Prediction | undefined;
    for (const p of this.rows.get(JSON.stringify([f.agent, f.taskType])) ?? []) {
      if (!ks.includes(keyString(p))) continue;
      if (!best || better(p, best)) best = p;
    }
    return best;
  }
}

function better(a: Prediction, b: Prediction): boolean {
  if ((a.action !== "") !== (b.action !== "")) return a.action !== "";
  return a.confidence > b.confidence;
}

/**
 * goFixed2 formats x with two decimals as Go's strconv ('f', 2) does: the
 * nearest, and on an exact tie (x an odd multiple of 1/8 for two decimals)
 * the even one, where JavaScript's toFixed rounds up.
 */
export function goFixed2(x: number): string {
  const eighths = x * 8;
  if (Number.isInteger(eighths) && Math.abs(eighths) % 2 === 1) {
    const lo = Math.floor(x * 100);
    return ((lo % 2 === 0 ? lo : lo + 1) / 100).toFixed(2);
  }
  return x.toFixed(2);
}

/** oneLine puts s on one line, as a header value must be. */
function oneLine(s: string): string {
  return s.split(/[\r\n]+/).filter((p) => p !== "").join(" ");
}

/**
 * setReplayHeaders writes r's headers into h as Go's event.Replay.Set does,
 * after dropping every Jsdlq-* header already there.
 */
export function setReplayHeaders(h: HeaderMap, r: ReplayHeaders): void {
  for (const name of Object.keys(h)) if (name.toLowerCase().startsWith("jsdlq-")) delete h[name];
  const set = (name: string, v: string) => {
    if (v !== "") h[name] = [v];
  };
  set("Jsdlq-Replay-Of", r.of);
  if (r.attempt > 0) set("Jsdlq-Replay-Attempt", String(r.attempt));
  set("Jsdlq-Strategy", r.strategy);
  for (const i of r.instructions) (h["Jsdlq-Instruction"] ??= []).push(oneLine(i));
  set("Jsdlq-Target-Model", r.targetModel);
  if (r.maxContextTokens > 0) set("Jsdlq-Max-Context-Tokens", String(r.maxContextTokens));
  if (r.maxOutputTokens > 0) set("Jsdlq-Max-Output-Tokens", String(r.maxOutputTokens));
  for (const s of r.completedSteps) (h["Jsdlq-Completed-Steps"] ??= []).push(oneLine(s));
}

/** reassign makes h name agent wherever it names one (the X-Agent header, in whatever case). */
export function reassign(h: HeaderMap, agent: string): void {
  for (const k of Object.keys(h)) if (k.toLowerCase() === HeaderAgent.toLowerCase()) h[k] = [agent];
}
