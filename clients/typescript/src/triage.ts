// The triage agent's side of an escalation, as the Go kit's (shared/agentkit/
// triage.go, triageclient.go): jsdlq sends an escalated or awaiting-approval
// entry's triage task (jsdlq.triage.v1) to the triage agent's subject, and
// the agent answers approve (with payload or header edits), replay or
// discard. The answer is applied by jsdlq's operator package behind the
// console's triage endpoint (TriageClient), under the same gates, authority
// rule and history as a person's: this kit copies none of them.

import { header, HeaderTenant, toHeaderMap, type HeaderMap } from "./contract.js";
import type { MsgHdrs } from "@nats-io/transport-node";

/** The triage task's schema, answers and header. */
export const TriageSchema = "jsdlq.triage.v1";
export const AnswerApprove = "approve";
export const AnswerReplay = "replay";
export const AnswerDiscard = "discard";
export const HeaderTriageEntry = "Jsdlq-Triage-Entry";
/** The console API's triage endpoint. */
export const TriagePath = "/api/v1/triage/answers";

/** A triage task (jsdlq.triage.v1, docs/triage-task.schema.json), fields as on the wire. */
export interface TriageTask {
  schema: string;
  notification_id: string;
  entry_id: string;
  tenant: string;
  agent: string;
  task_type?: string;
  status: string;
  category?: string;
  reason?: string;
  action?: string;
  summary: string;
  console_url?: string;
  answers: string[];
  /** RFC 3339, as jsdlq wrote it. */
  at: string;
}

/** A triage agent's decision on one entry. */
export interface TriageAnswer {
  /** approve, replay or discard: one of the task's answers. */
  answer: string;
  /** approve, replay: the replay's new payload version; absent keeps the stored one. */
  payload?: Uint8Array;
  /** approve, replay: headers to set on the replay (not Nats-*, Jsdlq-* or the task's identity). */
  setHeaders?: Record<string, string>;
  /** Why; required for a discard. */
  reason?: string;
}

/** approve is the answer that approves the proposed replay, with optional edits. */
export function approve(payload?: Uint8Array, setHeaders?: Record<string, string>): TriageAnswer {
  return { answer: AnswerApprove, payload, setHeaders };
}

/** replayAnswer is the answer that replays an escalated entry now, with optional edits. */
export function replayAnswer(payload?: Uint8Array, setHeaders?: Record<string, string>): TriageAnswer {
  return { answer: AnswerReplay, payload, setHeaders };
}

/** discard is the answer that ends the entry, for reason. */
export function discard(reason: string): TriageAnswer {
  return { answer: AnswerDiscard, reason };
}

/** triageActor is the actor a triage agent's answers are recorded as (in-process answers; the endpoint records the token's identity). */
export function triageActor(agent: string): string {
  return "agent:" + agent;
}

/** The message is not a valid triage task (malformed, another schema, headers that disagree with the body). */
export class BadTriageError extends Error {
  constructor(message: string) {
    super(`agentkit: not a valid triage task: ${message}`);
    this.name = "BadTriageError";
  }
}

/** The answer is not one the task offers, or lacks what it needs. */
export class BadAnswerError extends Error {
  constructor(message: string) {
    super(`agentkit: invalid triage answer: ${message}`);
    this.name = "BadAnswerError";
  }
}

/** The entry is no longer waiting for this decision (answered already, or moved on). Nothing changed. */
export class TriageDecidedError extends Error {
  constructor(message: string) {
    super(`agentkit: the entry was decided already: ${message}`);
    this.name = "TriageDecidedError";
  }
}

/** No entry of the task's tenant has the task's entry id. */
export class TriageNotFoundError extends Error {
  constructor(message: string) {
    super(`agentkit: the triage task's entry does not exist in its tenant: ${message}`);
    this.name = "TriageNotFoundError";
  }
}

/**
 * The answer was refused for good; the entry stays with the people its
 * notification reached. permissionDenied: the entry's rule does not grant
 * the triage agent (authority's permission denied).
 */
export class TriageRefusedError extends Error {
  constructor(message: string, readonly permissionDenied = false) {
    super(`agentkit: triage answer refused: ${message}`);
    this.name = "TriageRefusedError";
  }
}

/** The answer is recorded on the entry (status), its replay task left to reconcile. */
export class TriageUnfinishedError extends Error {
  constructor(message: string, readonly status: string) {
    super(`agentkit: triage answer recorded, its replay task left to reconcile: ${message}`);
    this.name = "TriageUnfinishedError";
  }
}

/** An Answerer applies a triage answer to the task's entry and resolves to the entry's new status (TriageClient). */
export interface Answerer {
  answerTriage(task: TriageTask, answer: TriageAnswer, by: string): Promise<string>;
}

function isStrings(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((s) => typeof s === "string");
}

/** checkTriage checks a triage task's body: the schema and the fields an answer needs. */
export function checkTriage(t: TriageTask): void {
  const bad = (m: string) => new BadTriageError(`entry ${JSON.stringify(t.entry_id ?? "")}: ${m}`);
  if (t.schema !== TriageSchema) throw bad(`schema ${JSON.stringify(t.schema)}, want ${JSON.stringify(TriageSchema)}`);
  if (!t.entry_id || !t.tenant || !t.status) throw bad("entry_id, tenant and status are required");
  if (!isStrings(t.answers) || t.answers.length === 0) throw bad("no answers offered");
  for (const a of t.answers) {
    if (a !== AnswerApprove && a !== AnswerReplay && a !== AnswerDiscard) throw bad(`unknown answer ${JSON.stringify(a)} offered`);
  }
}

const taskFields: Record<keyof TriageTask, "string" | "strings"> = {
  schema: "string", notification_id: "string", entry_id: "string", tenant: "string", agent: "string", task_type: "string",
  status: "string", category: "string", reason: "string", action: "string", summary: "string", console_url: "string",
  answers: "strings", at: "string",
};

/**
 * parseTriage decodes a triage task from a message's headers and body and
 * checks it (checkTriage), and that the headers naming the entry and its
 * tenant agree with the body.
 */
export function parseTriage(hdrs: MsgHdrs | HeaderMap | undefined, data: Uint8Array): TriageTask {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch (err) {
    throw new BadTriageError(`body: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new BadTriageError("body: not a JSON object");
  const t: Record<string, unknown> = {};
  for (const [k, kind] of Object.entries(taskFields)) {
    const v = (raw as Record<string, unknown>)[k];
    if (v === undefined || v === null) continue;
    if (kind === "string" ? typeof v !== "string" : !isStrings(v)) throw new BadTriageError(`body: ${k} is not a ${kind === "string" ? "string" : "list of strings"}`);
    t[k] = v;
  }
  const task = t as unknown as TriageTask;
  checkTriage(task);
  const h = toHeaderMap(hdrs);
  const entry = header(h, HeaderTriageEntry);
  if (entry !== task.entry_id) {
    throw new BadTriageError(`entry ${JSON.stringify(task.entry_id)}: header ${HeaderTriageEntry} is ${JSON.stringify(entry)}, the body names ${JSON.stringify(task.entry_id)}`);
  }
  const ten = header(h, HeaderTenant);
  if (ten !== "" && ten !== task.tenant) {
    throw new BadTriageError(`entry ${JSON.stringify(task.entry_id)}: header ${HeaderTenant} is ${JSON.stringify(ten)}, the body's tenant is ${JSON.stringify(task.tenant)}`);
  }
  return task;
}

/** triageOf reads the triage task msg carries (parseTriage). */
export function triageOf(msg: { headers?: MsgHdrs | undefined; data: Uint8Array }): TriageTask {
  return parseTriage(msg.headers, msg.data);
}

/** checkAnswer reports whether a is an answer task offers, complete (BadAnswerError otherwise). */
export function checkAnswer(a: TriageAnswer, task: TriageTask): void {
  if (!task.answers.includes(a.answer)) {
    throw new BadAnswerError(`${JSON.stringify(a.answer)} to entry ${task.entry_id}, which offers [${task.answers.join(" ")}]`);
  }
  if (a.answer === AnswerDiscard && (a.reason ?? "").trim() === "") throw new BadAnswerError(`a discard of entry ${task.entry_id} needs a reason`);
}

/** A function that returns the bearer token of a request to the triage endpoint (a Google ID token of the agent's identity for its audience). */
export type TokenFunc = () => Promise<string>;

/**
 * TriageClient is an Answerer that sends answers to a console's triage
 * endpoint (baseURL + TriagePath), as the Go kit's TriageClient does. The
 * console records the answer as the identity the token proves, not by. Its
 * refusals are this module's errors: 400 BadAnswerError, 403
 * TriageRefusedError (permissionDenied), 404 TriageNotFoundError, 409
 * TriageDecidedError, 422 TriageRefusedError; a recorded answer whose
 * replay task was left to reconcile is TriageUnfinishedError. Anything else
 * (no token, 401, 5xx, a network failure) is an Error a retry can help.
 */
export class TriageClient implements Answerer {
  private readonly url: string;
  constructor(baseURL: string, private readonly token: TokenFunc, private readonly timeoutMs = 30_000) {
    this.url = baseURL.replace(/\/$/, "") + TriagePath;
  }

  async answerTriage(task: TriageTask, a: TriageAnswer): Promise<string> {
    const body: Record<string, unknown> = { task: wireTask(task), answer: a.answer };
    if (a.payload && a.payload.length > 0) body.payload = Buffer.from(a.payload).toString("base64");
    if (a.setHeaders && Object.keys(a.setHeaders).length > 0) body.set_headers = a.setHeaders;
    if (a.reason) body.reason = a.reason;
    const tok = await this.token();
    const resp = await fetch(this.url, {
      method: "POST", body: JSON.stringify(body), signal: AbortSignal.timeout(this.timeoutMs),
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${tok}` },
    });
    const text = await resp.text();
    if (resp.status === 200) {
      let out: { status?: unknown; note?: unknown };
      try {
        out = JSON.parse(text) as { status?: unknown; note?: unknown };
      } catch {
        out = {};
      }
      if (typeof out.status !== "string" || out.status === "") throw new Error(`agentkit: the triage endpoint's answer ${JSON.stringify(text)} is not a TriageResponse`);
      if (typeof out.note === "string" && out.note !== "") throw new TriageUnfinishedError(out.note, out.status);
      return out.status;
    }
    throw triageStatusError(resp.status, text);
  }
}

// wireTask is the task as the endpoint decodes it: its known fields, the
// optional ones left out when empty (as Go writes them).
function wireTask(t: TriageTask): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(taskFields) as (keyof TriageTask)[]) {
    const v = t[k];
    const optional = k === "task_type" || k === "category" || k === "reason" || k === "action" || k === "console_url";
    if (v === undefined || (optional && v === "")) continue;
    out[k] = v;
  }
  return out;
}

/** triageStatusError is the error of a refusal the triage endpoint answered with status and body. */
export function triageStatusError(status: number, body: string): Error {
  let msg = body.trim();
  try {
    const e = JSON.parse(body) as { error?: { code?: string; message?: string } };
    if (e.error?.message) msg = `${e.error.code}: ${e.error.message}`;
  } catch {
    // not JSON: the body as it is
  }
  switch (status) {
    case 400:
      return new BadAnswerError(msg);
    case 403:
      return new TriageRefusedError(msg, true);
    case 404:
      return new TriageNotFoundError(msg);
    case 409:
      return new TriageDecidedError(msg);
    case 422:
      return new TriageRefusedError(msg);
  }
  return new Error(`agentkit: the triage endpoint answered ${status}: ${msg}`);
}

/** What handleTriage did with a triage task message. */
export type TriageOutcome = "answered" | "already_decided" | "refused" | "malformed" | "retry";

/** A triage agent's judgement of one task; the signal aborts when the kit must stop (never on its own). */
export type Decide = (task: TriageTask, signal: AbortSignal) => Promise<TriageAnswer>;
