// Keeping a task alive while an agent works on it, as the Go kit does
// (shared/agentkit/keepalive.go; docs/contracts.md, "Keep-alive"): one timer
// per running task sends the delivery's in-progress ack, so the server does
// not redeliver it mid-work, and renews once's claim, so no duplicate takes
// it over; a renewal that finds the claim lost aborts the work.

import type { JsMsg } from "@nats-io/jetstream";

/**
 * The keep-alive interval when neither the keepAliveMs option nor the
 * delivery's consumer says otherwise: half of JetStream's default AckWait
 * (30 s), in milliseconds.
 */
export const DefaultKeepAliveMs = 15_000;
/**
 * A claim's lease in keep-alive intervals: it outlives two renewals that
 * fail before a duplicate may take it over.
 */
export const LeaseIntervals = 3;

/**
 * While fn ran, its claim on the task was found taken over by another
 * worker or completed by one, or could not be renewed before its lease
 * ended (so another may have taken it over). fn's signal was aborted with
 * this error; nothing was recorded. Neither ack nor NAK the message: a
 * settlement from this stale delivery would reach the server as one of the
 * live delivery (an ack could remove a task the winner may still fail). The
 * server redelivers it after its ack deadline, and the redelivery finds the
 * other worker's claim (InProgressError) or its completion (skipped).
 */
export class ClaimLostError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(`agentkit: the task's claim was lost to another worker: ${message}`, options);
    this.name = "ClaimLostError";
  }
}

/** What the keep-alive needs of a consumer: its AckWait and BackOff, in nanoseconds. */
export interface ConsumerTiming {
  backoffNanos: number[];
  maxDeliver: number;
  ackWaitNanos: number;
}

/**
 * ackDeadlineNanos is how long the server waits for delivery n's ack before
 * it redelivers: with a BackOff, the entry for the delivery (the server takes
 * BackOff over AckWait; the last entry beyond the list), else AckWait.
 */
export function ackDeadlineNanos(c: ConsumerTiming, n: number): bigint {
  if (c.backoffNanos.length === 0 || n === 0) return BigInt(c.ackWaitNanos);
  return BigInt(c.backoffNanos[Math.min(n - 1, c.backoffNanos.length - 1)]!);
}

/**
 * keepAliveRun runs fn under one timer that, every interval, sends msg's
 * in-progress ack (msg may be absent) and then calls renew (may be absent).
 * A renew that throws ClaimLostError aborts fn's signal with it and stops
 * the timer; its other errors are reported to warn and the next tick tries
 * again (renew itself decides when a claim it cannot renew counts as lost).
 * A tick still running when the next is due skips that one, as the Go
 * kit's ticker drops a tick its loop is too busy for. The timer has stopped,
 * and a renewal in flight finished, when keepAliveRun settles: nothing
 * renews a claim after its completion is written. If the claim was lost,
 * that is the error, whatever fn did.
 */
export async function keepAliveRun<T>(
  intervalNanos: bigint,
  msg: JsMsg | undefined,
  renew: (() => Promise<void>) | undefined,
  warn: (message: string, attrs: Record<string, unknown>) => void,
  fn: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const ac = new AbortController();
  let inFlight: Promise<void> | undefined;
  const tick = async () => {
    if (msg) {
      try {
        msg.working();
      } catch (err) {
        warn("in-progress ack failed; the task may be redelivered mid-work", { subject: msg.subject, error: errText(err) });
      }
    }
    if (!renew) return;
    try {
      await renew();
    } catch (err) {
      if (err instanceof ClaimLostError) {
        ac.abort(err);
        clearInterval(timer);
        return;
      }
      warn("claim renewal failed; trying again at the next tick", { error: errText(err) });
    }
  };
  const timer = setInterval(() => {
    if (inFlight || ac.signal.aborted) return;
    inFlight = tick().finally(() => {
      inFlight = undefined;
    });
  }, Number(intervalNanos / 1_000_000n) || 1);
  let result: T;
  let failure: { err: unknown } | undefined;
  try {
    result = await fn(ac.signal);
  } catch (err) {
    failure = { err };
  }
  clearInterval(timer);
  await inFlight;
  if (ac.signal.reason instanceof ClaimLostError) throw ac.signal.reason;
  if (failure) throw failure.err;
  return result!;
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
