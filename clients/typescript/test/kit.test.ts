// The kit against a real nats-server with JetStream and the Firestore
// emulator (see env.ts).

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Timestamp } from "@google-cloud/firestore";
import { RetentionPolicy } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, headers, type NatsConnection } from "@nats-io/transport-node";

import {
  idempotencyDocID, InProgressError, InvalidTaskError, Kit, legacyIdempotencyDocID, RecordTooLargeError, StatusCompleted, StatusInProgress,
  taskOf, type Failure, type Task,
} from "../src/index.js";
import { firestore, fixture, natsURL, next, type Fixture } from "../testkit/env.js";

const dec = new TextDecoder();

async function publish(f: Fixture, data: Uint8Array | string, hdr: Record<string, string> = {}): Promise<number> {
  const h = headers();
  for (const [k, v] of Object.entries(hdr)) h.set(k, v);
  const ack = await f.js.publish("agents.backend.tasks.review", data, { headers: h });
  return ack.seq;
}

test("terminate copies the task to the record stream, then terminates it", async () => {
  const f = await fixture({ dlq: true });
  try {
    const payload = new Uint8Array([0, 0xff, 0x61, 0x0d, 0x0a]);
    const seq = await publish(f, payload, { "X-Tenant-ID": "acme", "Nats-Msg-Id": "task-1-v1" });
    const advisories = f.nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.TASKS.backend", { max: 1, timeout: 5000 });
    const kit = new Kit(f.nc, { agent: "backend" });
    const m = await next(f.js);
    await kit.terminate(m, { code: "hallucination_loop", detail: "loop\nat step 3", completedSteps: ["draft"], retryable: true });

    const rec = await f.jsm.streams.getMessage("DLQ_RECORDS", { seq: 1 });
    assert.ok(rec, "no record in DLQ_RECORDS");
    assert.equal(rec.subject, "dlq.records.TASKS");
    assert.deepEqual(rec.data, payload, "record payload");
    const h = rec.header;
    assert.equal(h.get("X-Tenant-ID"), "acme");
    assert.equal(h.get("Jsdlq-Orig-Nats-Msg-Id"), "task-1-v1", "the task's own Nats-Msg-Id travels escaped");
    assert.equal(h.get("Nats-Msg-Id"), `TASKS.${seq}`);
    const meta = JSON.parse(h.get("Jsdlq-Record"));
    assert.equal(meta.schema, "jsdlq.record.v1");
    assert.equal(meta.stream_seq, seq);
    assert.equal(meta.consumer, "backend");
    assert.equal(meta.deliveries, 1);
    assert.deepEqual({ ...meta.failure, recorded_at: undefined }, {
      code: "hallucination_loop", detail: "loop\nat step 3", attempt: 1, agent: "backend",
      completed_steps: ["draft"], retryable: true, recorded_at: undefined,
    });
    // A TERM on a WorkQueue stream removes the task: the record is its only copy.
    assert.equal(await f.jsm.streams.getMessage("TASKS", { seq }), null, "the task after its TERM");
    for await (const a of advisories) {
      const adv = JSON.parse(a.string());
      assert.equal(adv.stream_seq, seq);
      assert.equal(adv.reason, "hallucination_loop: loop at step 3");
    }
  } finally {
    await f.close();
  }
});

// Copy then term: when the record cannot be stored, the TERM is not sent;
// the task is NAKed and comes back with its payload.
test("terminate under a record-stream outage keeps the task", async (t) => {
  const outages: { name: string; setup: (f: Fixture) => Promise<void> }[] = [
    { name: "no record stream", setup: async () => {} },
    { name: "record stream deleted", setup: async (f) => {
      await f.jsm.streams.delete("DLQ_RECORDS");
    } },
    { name: "another stream holds the record subjects", setup: async (f) => {
      await f.jsm.streams.delete("DLQ_RECORDS");
      await f.jsm.streams.add({ name: "IMPOSTOR", subjects: ["dlq.records.>"] });
    } },
  ];
  for (const o of outages) {
    await t.test(o.name, async () => {
      const f = await fixture({ dlq: o.name !== "no record stream" });
      try {
        await o.setup(f);
        const seq = await publish(f, "task payload");
        const kit = new Kit(f.nc, { agent: "backend" });
        const m = await next(f.js);
        await assert.rejects(kit.terminate(m, { code: "impossible_task" }), /NAKed, not terminated/);
        await f.acks.sync(f.nc);
        assert.deepEqual(f.acks.payloads.filter((p) => p.startsWith("+TERM")), [], "TERM sent");
        assert.equal(f.acks.payloads.length, 1, `acks ${JSON.stringify(f.acks.payloads)}`);
        assert.match(f.acks.payloads[0]!, /^-NAK/);
        const again = await next(f.js);
        assert.equal(again.info.streamSequence, seq);
        assert.equal(again.info.deliveryCount, 2);
        assert.equal(again.string(), "task payload");
        if (o.name === "another stream holds the record subjects") {
          const si = await f.jsm.streams.info("IMPOSTOR");
          assert.equal(si.state.messages, 0, "the record landed in the wrong stream");
        }
      } finally {
        await f.close();
      }
    });
  }
});

test("terminate of a redelivered task keeps one record", async () => {
  // A crash between the record and the TERM redelivers the task and the
  // agent terminates it again: Nats-Msg-Id <stream>.<seq> makes the second
  // copy a duplicate the record stream drops.
  const f = await fixture({ dlq: true, retention: RetentionPolicy.Limits });
  try {
    await publish(f, "task");
    const kit = new Kit(f.nc);
    const first = await next(f.js);
    const lostTerm = Object.create(first, { term: { value: () => { throw new Error("connection lost"); } } });
    await assert.rejects(kit.terminate(lostTerm, { code: "impossible_task" }), /after recording it/);
    first.nak();
    await kit.terminate(await next(f.js), { code: "impossible_task" });
    const si = await f.jsm.streams.info("DLQ_RECORDS");
    assert.equal(si.state.messages, 1);
  } finally {
    await f.close();
  }
});

test("terminate of a task too large to copy records the failure and NAKs", async () => {
  const f = await fixture({ dlq: true });
  try {
    const max = f.nc.info!.max_payload;
    const seq = await publish(f, new Uint8Array(max - 200).fill(0x78));
    const kit = new Kit(f.nc, { agent: "backend" });
    const m = await next(f.js);
    await assert.rejects(kit.terminate(m, { code: "context_window_overflow", detail: "d".repeat(300) }),
      (err) => err instanceof RecordTooLargeError);
    const kv = await new Kvm(f.js).open("dlq_failures");
    const e = await kv.get(`TASKS.${seq}`);
    assert.ok(e, "failure not recorded");
    assert.equal(JSON.parse(e.string()).code, "context_window_overflow");
    assert.equal((await next(f.js)).data.length, max - 200);
  } finally {
    await f.close();
  }
});

test("fail records the failure in the bucket and NAKs with the consumer's backoff", async () => {
  const f = await fixture({ dlq: true, retention: RetentionPolicy.Limits });
  try {
    const seq = await publish(f, "task");
    const now = new Date(Date.UTC(2026, 10, 21, 12, 0, 0, 250));
    const kit = new Kit(f.nc, { agent: "backend", clock: () => now });
    const kv = await new Kvm(f.js).open("dlq_failures");
    // The last delivery's NAK only ends the task: no delay.
    const delays = [100, 200, 0];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const m = await next(f.js);
      assert.equal(m.info.deliveryCount, attempt);
      assert.equal(await kit.backoffMs(m.info), delays[attempt - 1], `backoff of delivery ${attempt}`);
      await kit.fail(m, { code: "llm_provider_timeout", detail: "504 <gateway>", completedSteps: ["fetch"] });
      const e = await kv.get(`TASKS.${seq}`);
      assert.ok(e);
      // Byte for byte what the Go kit writes (field order, omitempty, HTML escaping, time format).
      assert.equal(dec.decode(e.value), `{"code":"llm_provider_timeout","detail":"504 \\u003cgateway\\u003e","attempt":${attempt},` +
        `"agent":"backend","completed_steps":["fetch"],"recorded_at":"2026-11-21T12:00:00.25Z"}`);
      await f.acks.sync(f.nc);
      const nak = f.acks.payloads.at(-1)!;
      const want = delays[attempt - 1]! > 0 ? { delay: delays[attempt - 1]! * 1e6 } : undefined;
      assert.deepEqual(nak === "-NAK" ? undefined : JSON.parse(nak.replace(/^-NAK /, "")), want, `NAK of delivery ${attempt}: ${nak}`);
    }
    // MaxDeliver 3 is exhausted: no fourth delivery.
    await assert.rejects(next(f.js, 1000), /no delivery/);
  } finally {
    await f.close();
  }
});

test("fail without a code still NAKs", async () => {
  const f = await fixture({ dlq: true });
  try {
    await publish(f, "task");
    const kit = new Kit(f.nc);
    await assert.rejects(kit.fail(await next(f.js), { code: "" } as Failure), /needs a failure code/);
    assert.equal((await next(f.js)).info.deliveryCount, 2);
  } finally {
    await f.close();
  }
});

test("once runs once across redeliveries and records the completion before resolving", async () => {
  const fs = firestore();
  const kit = new Kit(await natsStub(), { firestore: fs, agent: "backend" });
  let runs = 0;
  const fn = async () => { runs++; };
  const task = { tenant: "acme", key: "task-1-v1" };
  assert.equal(await kit.once(task, fn), true);
  assert.equal(await kit.once(task, fn), false, "a redelivery or a replay finds it completed");
  assert.equal(runs, 1);
  const doc = (await fs.collection("task-idempotency").doc(idempotencyDocID("acme", "task-1-v1")).get()).data()!;
  assert.equal(doc.status, StatusCompleted);
  assert.equal(doc.tenant, "acme");
  assert.equal(doc.key, "task-1-v1");
  assert.equal(doc.agent, "backend");
  assert.match(doc.owner, /^[0-9a-f]{16}$/);
  assert.ok(doc.completed_at instanceof Timestamp && doc.expire_at instanceof Timestamp);
  assert.equal(doc.expire_at.toMillis() - doc.completed_at.toMillis(), 72 * 3600 * 1000, "expire_at 72 h after completion");
  assert.deepEqual(Object.keys(doc).sort(), ["agent", "completed_at", "expire_at", "key", "owner", "status", "tenant"]);
  await fs.terminate();
});

test("once: concurrent duplicates of one key run it once", async () => {
  const fs = firestore();
  const kit = new Kit(await natsStub(), { firestore: fs });
  const n = 8;
  let runs = 0;
  let settled = 0;
  let open!: () => void;
  const gate = new Promise<void>((r) => { open = r; });
  // The winner holds its claim until every duplicate has given up (or a
  // second one runs, which fails the test): no timing involved.
  const check = () => { if (settled >= n - 1 || runs > 1) open(); };
  const results = await Promise.all(Array.from({ length: n }, () =>
    kit.once({ tenant: "acme", key: "dup-key" }, async () => { runs++; check(); await gate; })
      .then((ran) => ({ ran, err: undefined as unknown }), (err: unknown) => ({ ran: false, err }))
      .finally(() => { settled++; check(); })));
  assert.equal(runs, 1, "fn runs");
  assert.equal(results.filter((r) => r.ran).length, 1);
  for (const r of results) {
    if (r.err !== undefined) assert.ok(r.err instanceof InProgressError, `duplicate: ${String(r.err)}`);
  }
  await fs.terminate();
});

test("once releases the claim when fn fails", async () => {
  const fs = firestore();
  const kit = new Kit(await natsStub(), { firestore: fs });
  const task = { tenant: "acme", key: "k" };
  await assert.rejects(kit.once(task, async () => { throw new Error("tool failed"); }), /tool failed/);
  assert.equal(await kit.once(task, async () => {}), true, "the retry runs");
  await fs.terminate();
});

test("once takes over an expired claim, and the old attempt's release does not undo it", async () => {
  const fs = firestore();
  let now = new Date(Date.UTC(2026, 10, 21, 12));
  const kit = new Kit(await natsStub(), { firestore: fs, clock: () => now, leaseMs: 60_000 });
  const crash = { tenant: "acme", key: "crash" };
  await assert.rejects(kit.once(crash, async () => {
    await assert.rejects(kit.once(crash, async () => {}), (err) => err instanceof InProgressError);
    now = new Date(now.getTime() + 120_000);
    assert.equal(await kit.once(crash, async () => {}), true, "a duplicate after the lease runs");
    throw new Error("crashed");
  }), /crashed/);
  assert.equal(await kit.once(crash, async () => {}), false);
  await fs.terminate();
});

// Two tenants publish a task with the same id: each runs once. The record
// is written before the ack and named by tenant and key, so a redelivery
// (the ack lost) or a second publish of a tenant's task finds that tenant's
// record and is skipped; the other tenant's task finds none and runs.
test("once: two tenants publishing the same task id each run once", async () => {
  const f = await fixture({ dlq: false });
  const fs = firestore();
  try {
    const kit = new Kit(f.nc, { firestore: fs, agent: "backend" });
    for (const t of ["acme", "beta", "acme", "beta", ""]) {
      await publish(f, t, t ? { "X-Tenant-ID": t, "X-Task-ID": "task-1", "X-Task-Version": "v1" } : { "X-Task-ID": "task-1", "X-Task-Version": "v1" });
    }
    const runs = new Map<string, number>();
    const got: string[] = [];
    for (let i = 0; i < 7; i++) {
      const m = await next(f.js);
      const task = taskOf(m);
      assert.equal(task.publishedAt, m.timestampNanos);
      const ran = await kit.once(task, async () => { runs.set(task.tenant, (runs.get(task.tenant) ?? 0) + 1); });
      got.push(`${task.tenant} ${ran}`);
      // The first delivery of each of the first two tasks loses its ack.
      if (m.info.deliveryCount === 1 && m.info.streamSequence <= 2) m.nak();
      else m.ack();
    }
    assert.deepEqual(got.sort(), ["acme false", "acme false", "acme true", "beta false", "beta false", "beta true", "default true"]);
    assert.deepEqual(Object.fromEntries(runs), { acme: 1, beta: 1, default: 1 });
    for (const t of ["acme", "beta", "default"]) {
      const doc = (await fs.collection("task-idempotency").doc(idempotencyDocID(t, "task-1-v1")).get()).data();
      assert.equal(doc?.tenant, t, `${t}'s record`);
      assert.equal(doc?.key, "task-1-v1");
    }
  } finally {
    await fs.terminate();
    await f.close();
  }
});

test("once: one tenant's claim does not hold another tenant's task of the key", async () => {
  const fs = firestore();
  const kit = new Kit(await natsStub(), { firestore: fs });
  assert.equal(await kit.once({ tenant: "acme", key: "shared" }, async () => {
    assert.equal(await kit.once({ tenant: "beta", key: "shared" }, async () => {}), true, "beta's task runs");
    await assert.rejects(kit.once({ tenant: "acme", key: "shared" }, async () => {}), (err) => err instanceof InProgressError);
  }), true);
  await fs.terminate();
});

test("once refuses a task it cannot record", async () => {
  const fs = firestore();
  const kit = new Kit(await natsStub(), { firestore: fs });
  const bad: Task[] = [
    { tenant: "acme", key: "" }, { tenant: "", key: "k" }, { tenant: "ac\ud800me", key: "k" }, { tenant: "acme", key: "k\udc00" },
    { tenant: " acme", key: "k" }, { tenant: "acme", key: "k\n" },
  ];
  let runs = 0;
  for (const task of bad) {
    await assert.rejects(kit.once(task, async () => { runs++; }), (err) => err instanceof InvalidTaskError, JSON.stringify(task));
  }
  assert.equal(runs, 0);
  assert.equal((await fs.collection("task-idempotency").get()).size, 0, "nothing written");
  await fs.terminate();
});

// Records an older kit wrote under the key alone (no tenant) count while the
// migration window lasts, and only when written at or after the task was
// published: one written before belongs to another task.
test("once honours the records of older kits during the migration window", async () => {
  const fs = firestore();
  const published = new Date(Date.UTC(2026, 10, 21, 12));
  const now = new Date(published.getTime() + 10 * 60_000);
  const nanos = (d: Date) => BigInt(d.getTime()) * 1_000_000n;
  const at = (ms: number) => Timestamp.fromMillis(published.getTime() + ms);
  const completed = (ms: number) => ({ status: StatusCompleted, agent: "old", completed_at: at(ms), expire_at: at(ms + 72 * 3600_000) });
  const claimed = (ms: number, untilMs: number) => ({
    status: StatusInProgress, owner: "0123456789abcdef", claimed_at: at(ms), lease_until: Timestamp.fromMillis(now.getTime() + untilMs),
    expire_at: at(ms + 72 * 3600_000),
  });
  const cases: { name: string; old: Record<string, unknown>; publishedAt?: bigint; until?: Date; ran: boolean | "in_progress" }[] = [
    { name: "completed after the publish: done", old: completed(60_000), ran: false },
    { name: "completed at the publish: done", old: completed(0), ran: false },
    { name: "completed before the publish: another task's", old: completed(-1), ran: true },
    { name: "publish time unknown: cannot be told", old: completed(60_000), publishedAt: undefined, ran: true },
    { name: "live claim after the publish: in progress", old: claimed(5 * 60_000, 60_000), ran: "in_progress" },
    { name: "live claim before the publish: another task's", old: claimed(-60_000, 60_000), ran: true },
    { name: "expired claim after the publish: runs", old: claimed(60_000, -1000), ran: true },
    { name: "window open a moment longer: done", old: completed(60_000), until: new Date(now.getTime() + 1), ran: false },
    { name: "window over: not read", old: completed(60_000), until: now, ran: true },
  ];
  for (const [i, c] of cases.entries()) {
    const key = `legacy/${i}`;
    const legacy = fs.collection("task-idempotency").doc(legacyIdempotencyDocID(key));
    const old = { key, ...c.old };
    await legacy.set(old);
    const kit = new Kit(await natsStub(), { firestore: fs, clock: () => now, legacyCompletionsUntil: c.until });
    const task: Task = { tenant: "acme", key, publishedAt: "publishedAt" in c ? c.publishedAt : nanos(published) };
    const run = kit.once(task, async () => {});
    if (c.ran === "in_progress") await assert.rejects(run, (err) => err instanceof InProgressError, c.name);
    else assert.equal(await run, c.ran, c.name);
    assert.deepEqual((await legacy.get()).data(), old, `${c.name}: the older kit's record is only read`);
    const own = await fs.collection("task-idempotency").doc(idempotencyDocID("acme", key)).get();
    assert.equal(own.exists, c.ran === true, `${c.name}: acme's own record`);
  }
  await fs.terminate();
});

// natsStub is a connection once does not use (it needs only Firestore).
const conns: NatsConnection[] = [];
after(() => Promise.all(conns.map((nc) => nc.close())));
async function natsStub(): Promise<NatsConnection> {
  const nc = await connect({ servers: natsURL() });
  conns.push(nc);
  return nc;
}
