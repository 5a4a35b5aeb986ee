// The context pre-flight: refuse a model call that cannot fit the window,
// with the reason code context_window_overflow, before spending tokens.
// Same estimate and thresholds as the Go kit (shared/agentkit/budget.go).

import { CodeContextWindowOverflow, type Failure, type HeaderMap } from "./contract.js";
import { parseReplay } from "./replay.js";
import type { MsgHdrs } from "@nats-io/transport-node";

/**
 * estimateTokens estimates how many model tokens text takes: ASCII bytes / 4,
 * rounded up, plus one token per non-ASCII character. BPE tokenizers average
 * about 4 characters per token on English prose and code and about one per
 * character (or more) outside ASCII, so it errs on the high side, the safe
 * side for a pre-flight.
 */
export function estimateTokens(text: string): number {
  let ascii = 0;
  let other = 0;
  for (const ch of text) {
    if (ch.codePointAt(0)! < 0x80) ascii++;
    else other++;
  }
  return Math.floor((ascii + 3) / 4) + other;
}

/** The share of the window above which check warns. */
export const DefaultWarnFraction = 0.8;

/** What check found. */
export interface Estimate {
  tokens: number;
  maxTokens: number;
  /** Above the warn fraction of the window. */
  warn: boolean;
}

/** fraction is the share of the window the estimate uses. */
export function fraction(e: Estimate): number {
  return e.maxTokens <= 0 ? 0 : e.tokens / e.maxTokens;
}

/** OverflowError is check's refusal; failure() is what to terminate with. */
export class OverflowError extends Error {
  readonly estimate: Estimate;
  constructor(estimate: Estimate) {
    super(`agentkit: context_window_overflow: about ${estimate.tokens} tokens, window ${estimate.maxTokens}`);
    this.name = "OverflowError";
    this.estimate = estimate;
  }

  /** The failure to record for this refusal; retryable is left to the policy. */
  failure(): Failure {
    return { code: CodeContextWindowOverflow, detail: this.message };
  }
}

/** A context window. */
export class Budget {
  constructor(
    readonly maxTokens: number,
    readonly warnFraction: number = DefaultWarnFraction,
  ) {}

  /**
   * check estimates the tokens of the prompt parts and throws an
   * OverflowError when they exceed the window; a budget without maxTokens
   * admits everything.
   */
  check(...parts: string[]): Estimate {
    const e: Estimate = { tokens: 0, maxTokens: this.maxTokens, warn: false };
    for (const p of parts) e.tokens += estimateTokens(p);
    if (this.maxTokens <= 0) return e;
    if (e.tokens > this.maxTokens) throw new OverflowError(e);
    const warn = this.warnFraction > 0 ? this.warnFraction : DefaultWarnFraction;
    e.warn = fraction(e) > warn;
    return e;
  }
}

/**
 * budgetFromHeaders is the agent's window, narrowed by a replay's
 * Jsdlq-Max-Context-Tokens header when that is smaller.
 */
export function budgetFromHeaders(h: MsgHdrs | HeaderMap | undefined, window: number): Budget {
  let max = window;
  const n = parseReplay(h).maxContextTokens;
  if (n > 0 && (max <= 0 || n < max)) max = n;
  return new Budget(max);
}
