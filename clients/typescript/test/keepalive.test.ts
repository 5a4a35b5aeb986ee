// The keep-alive of once (in-progress acks and claim renewal on one timer)
// against a real nats-server with JetStream and the Firestore emulator (see
// env.ts), as shared/agentkit/keepalive_test.go holds the Go kit to it.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once as eventOnce } from "node:events";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { Timestamp } from "@google-cloud/firestore";
import { connect, headers, nanos } from "@nats-io/transport-node";

import {
  ClaimLostError, idempotencyDocID, InProgressError, Kit, LeaseIntervals, StatusCompleted, StatusInProgress, taskOf,
} from "../src/index.js";
import { firestore, fixture, natsURL, next, waitFor, type Fixture } from "../testkit/env.js";

async function publishTask(f: Fixture, key: string): Promise<number> {
  const h = headers();
  h.set("X-Tenant-ID", "acme");
  h.set("X-Idempotency-Key", key);
  return (await f.js.publish("agents.backend.tasks.review", key, { headers: h })).seq;
}

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve, reject) => {
  const t = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => { clearTimeout(t); reject(signal.reason); });
});

// A task that runs three times its ack deadline completes once and is acked
// once: the in-progress acks keep the server from redelivering it mid-work,
// and the claim, renewed on the same timer with a lease of three intervals,
// is never taken over. The deadline is the consumer's AckWait, or its
// BackOff entry for the delivery (which the server waits instead).
test("once: a task running three times its ack deadline completes once, acked once", async (t) => {
  const cases = [
    { name: "AckWait", consumer: { max_deliver: 3, ack_wait: nanos(1000) }, deadlineMs: 1000 },
    { name: "BackOff", consumer: { max_deliver: 3, ack_wait: nanos(60_000), backoff: [nanos(1000), nanos(60_000)] }, deadlineMs: 1000 },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const f = await fixture({ dlq: false, consumer: c.consumer });
      const fs = firestore();
      try {
        const seq = await publishTask(f, "long-1");
        const m = await next(f.js);
        const kit = new Kit(f.nc, { firestore: fs, agent: "backend" });
        const ref = fs.collection("task-idempotency").doc(idempotencyDocID("acme", "long-1"));
        let claimed: FirebaseFirestore.DocumentData | undefined;
        let runs = 0;
        const ran = await kit.once(taskOf(m), async (signal) => {
          runs++;
          claimed = (await ref.get()).data();
          await sleep(3 * c.deadlineMs, signal);
        });
        assert.equal(ran, true);
        assert.equal(runs, 1);
        await m.ackAck();
        const leaseMs = (claimed!.lease_until as Timestamp).toMillis() - (claimed!.claimed_at as Timestamp).toMillis();
        assert.equal(leaseMs, LeaseIntervals * c.deadlineMs / 2, "the lease: three intervals of half the ack deadline");
        const rec = (await ref.get()).data()!;
        assert.equal(rec.status, StatusCompleted);
        assert.equal(rec.owner, claimed!.owner, "completed by the claim's owner");
        const info = await f.jsm.consumers.info("TASKS", "backend");
        assert.equal(info.delivered.consumer_seq, 1, "deliveries");
        assert.equal(info.num_redelivered, 0);
        assert.equal(info.num_ack_pending, 0);
        assert.equal(info.ack_floor.stream_seq, seq);
        await f.acks.sync(f.nc);
        const kinds = f.acks.kinds();
        assert.equal(kinds["+ACK"], 1, `acks ${JSON.stringify(kinds)}`);
        assert.ok((kinds["+WPI"] ?? 0) >= 4, `in-progress acks ${JSON.stringify(kinds)}`);
        assert.deepEqual(Object.keys(kinds).sort(), ["+ACK", "+WPI"]);
      } finally {
        await fs.terminate();
        await f.close();
      }
    });
  }
});

// The claim is renewed while fn runs: the lease moves on, renewed_at says
// when, expire_at follows the last renewal.
test("once renews its claim", async () => {
  const fs = firestore();
  const nc = await connect({ servers: natsURL() });
  try {
    const kit = new Kit(nc, { firestore: fs, keepAliveMs: 100 });
    const ref = fs.collection("task-idempotency").doc(idempotencyDocID("acme", "renewed"));
    let renewed: FirebaseFirestore.DocumentData | undefined;
    assert.equal(await kit.once({ tenant: "acme", key: "renewed" }, async () => {
      renewed = await waitFor("the claim's renewal", 30_000, async () => {
        const d = (await ref.get()).data();
        return d?.renewed_at ? d : undefined;
      });
    }), true);
    const ms = (f: string) => (renewed![f] as Timestamp).toMillis();
    assert.equal(renewed!.status, StatusInProgress);
    assert.equal(ms("lease_until") - ms("renewed_at"), LeaseIntervals * 100);
    assert.equal(ms("expire_at") - ms("renewed_at"), 72 * 3600_000);
    assert.ok(ms("renewed_at") > ms("claimed_at"));
    assert.deepEqual(Object.keys(renewed!).sort(),
      ["claimed_at", "expire_at", "key", "lease_until", "owner", "renewed_at", "status", "tenant"]);
  } finally {
    await fs.terminate();
    await nc.close();
  }
});

// A claim another worker took over, or completed, aborts the work at the
// next renewal: once rejects with ClaimLostError, the loser records nothing
// and the kit sends no ack, NAK or TERM, only in-progress acks.
test("once: a lost claim aborts the work and nothing is settled or recorded", async (t) => {
  const cases = [
    { name: "taken over", winner: (now: number) => ({ status: StatusInProgress, owner: "ffffffffffffffff",
      claimed_at: Timestamp.fromMillis(now), lease_until: Timestamp.fromMillis(now + 3600_000) }), ignoreAbort: false },
    { name: "completed by another", winner: (now: number) => ({ status: StatusCompleted, owner: "ffffffffffffffff",
      completed_at: Timestamp.fromMillis(now) }), ignoreAbort: false },
    { name: "taken over, fn ignores the abort", winner: (now: number) => ({ status: StatusInProgress, owner: "ffffffffffffffff",
      claimed_at: Timestamp.fromMillis(now), lease_until: Timestamp.fromMillis(now + 3600_000) }), ignoreAbort: true },
  ];
  for (const [i, c] of cases.entries()) {
    await t.test(c.name, async () => {
      const f = await fixture({ dlq: false, consumer: { max_deliver: 3, ack_wait: nanos(1000) } });
      const fs = firestore();
      try {
        const key = `lost-${i}`;
        await publishTask(f, key);
        const m = await next(f.js);
        const kit = new Kit(f.nc, { firestore: fs, agent: "loser" });
        const ref = fs.collection("task-idempotency").doc(idempotencyDocID("acme", key));
        const winner = { key, tenant: "acme", agent: "winner", ...c.winner(Date.now()), expire_at: Timestamp.fromMillis(Date.now() + 3600_000) };
        let reason: unknown;
        await assert.rejects(kit.once(taskOf(m), async (signal) => {
          await ref.set(winner);
          await new Promise<void>((resolve, reject) => {
            const t = setTimeout(() => reject(new Error("after 30 s: the work was not aborted")), 30_000);
            signal.addEventListener("abort", () => { clearTimeout(t); resolve(); });
          });
          reason = signal.reason;
          if (!c.ignoreAbort) throw signal.reason;
        }), (err) => err instanceof ClaimLostError);
        assert.ok(reason instanceof ClaimLostError, `fn's signal aborted with ${String(reason)}`);
        assert.deepEqual((await ref.get()).data(), winner, "the winner's record, untouched");
        await f.acks.sync(f.nc);
        const kinds = f.acks.kinds();
        assert.deepEqual(Object.keys(kinds), ["+WPI"], `acks ${JSON.stringify(kinds)}: in-progress only`);
      } finally {
        await fs.terminate();
        await f.close();
      }
    });
  }
});

// A worker killed mid-task (a child process, SIGKILL) is taken over once its
// claim lapses: the server redelivers the task after its ack deadline, the
// redelivery meets the live claim (InProgressError, NAK) until the lease
// ends, then runs it, and the work runs to one completion.
test("once: a worker killed mid-task is taken over after its claim lapses", async (t) => {
  const f = await fixture({ dlq: false, consumer: { max_deliver: 20, ack_wait: nanos(1000) } });
  const project = "ts-" + randomBytes(6).toString("hex");
  const fs = firestore(project);
  try {
    const seq = await publishTask(f, "killed");
    const worker = spawn(process.execPath, [fileURLToPath(new URL("../testkit/worker.js", import.meta.url)), project],
      { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    worker.stdout.setEncoding("utf8");
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error("after 30 s: the worker has not started the task")), 30_000);
      worker.stdout.on("data", (d: string) => { out += d; if (out.includes("started")) { clearTimeout(t); resolve(); } });
      worker.on("exit", (code) => { clearTimeout(t); reject(new Error(`worker exited (${code}) before it started`)); });
    });
    worker.kill("SIGKILL");
    await eventOnce(worker, "exit");

    const kit = new Kit(f.nc, { firestore: fs, agent: "worker-b" });
    let completions = 0;
    let busy = 0; // deliveries that met worker A's live claim
    await waitFor("worker B to take the task over", 60_000, async () => {
      const m = await next(f.js, 30_000);
      try {
        assert.equal(await kit.once(taskOf(m), async () => { completions++; }), true);
      } catch (err) {
        if (!(err instanceof InProgressError)) throw err;
        busy++; // worker A's claim has not lapsed yet
        m.nak(300);
        return undefined;
      }
      await m.ackAck();
      return true;
    });
    assert.equal(completions, 1);
    t.diagnostic(`worker B met worker A's live claim ${busy} times before it lapsed`);
    const rec = (await fs.collection("task-idempotency").doc(idempotencyDocID("acme", "killed")).get()).data()!;
    assert.equal(rec.status, StatusCompleted);
    assert.equal(rec.agent, "worker-b");
    const info = await f.jsm.consumers.info("TASKS", "backend");
    assert.equal(info.num_ack_pending, 0);
    assert.equal(info.ack_floor.stream_seq, seq);
  } finally {
    await fs.terminate();
    await f.close();
  }
});
