// publish: the message id from the task's tenant and key, and the parts of
// the predictions' pre-flight that must compute as Go does (the rest is held
// to the Go kit byte for byte by internal/kitcompat's TestKitsPublishAlike).

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  goFixed2, goPathEscape, hourBucket, idempotencyDocID, Kit, keys, keyString, loadBucket, predictedSeq, sizeBucket, tokenBucket,
} from "../src/index.js";
import { fixture } from "../testkit/env.js";

test("publish sets Nats-Msg-Id from the tenant and key: a retry is one task, two tenants two", async (t) => {
  const f = await fixture({ dlq: false });
  try {
    const kit = new Kit(f.nc);
    const cases: { name: string; headers: Record<string, string[]>[]; tasks: number; id: string }[] = [
      { name: "a retry with one key", headers: [{ "X-Tenant-ID": ["acme"], "X-Idempotency-Key": ["r1"] },
        { "X-Tenant-ID": ["acme"], "X-Idempotency-Key": ["r1"] }], tasks: 1, id: idempotencyDocID("acme", "r1") },
      { name: "two tenants with one key", headers: [{ "X-Tenant-ID": ["acme"], "X-Task-ID": ["s1"] },
        { "X-Tenant-ID": ["beta"], "X-Task-ID": ["s1"] }], tasks: 2, id: idempotencyDocID("acme", "s1") },
      { name: "the default tenant", headers: [{ "X-Idempotency-Key": ["d1"] }, { "X-Tenant-ID": [" default "], "X-Idempotency-Key": ["d1"] }],
        tasks: 1, id: idempotencyDocID("default", "d1") },
      { name: "no key", headers: [{ "X-Tenant-ID": ["acme"] }, { "X-Tenant-ID": ["acme"] }], tasks: 2, id: "" },
      { name: "the publisher's own id", headers: [{ "X-Idempotency-Key": ["o1"], "Nats-Msg-Id": ["mine"] },
        { "X-Idempotency-Key": ["o2"], "Nats-Msg-Id": ["mine"] }], tasks: 1, id: "mine" },
    ];
    for (const [i, c] of cases.entries()) {
      await t.test(c.name, async () => {
        const subject = `agents.backend.tasks.case${i}`;
        const seqs = new Set<number>();
        for (const h of c.headers) seqs.add((await kit.publish(subject, "task", h)).ack.seq);
        assert.equal(seqs.size, c.tasks, "tasks");
        const first = await f.jsm.streams.getMessage("TASKS", { seq: Math.min(...seqs) });
        assert.equal(first?.header.get("Nats-Msg-Id") ?? "", c.id);
      });
    }
  } finally {
    await f.close();
  }
});

test("the pre-flight computes as Go does", () => {
  // strconv's 'f' rounds an exact tie to even; toFixed rounds it up.
  const fixed: [number, string][] = [[0.125, "0.12"], [0.375, "0.38"], [0.625, "0.62"], [0.875, "0.88"], [1, "1.00"], [0.835, "0.83"],
    [0.2849999, "0.28"], [0.9, "0.90"], [0, "0.00"]];
  for (const [x, want] of fixed) assert.equal(goFixed2(x), want, `goFixed2(${x})`);
  // url.PathEscape keeps $&+:=@ and escapes / ; , ? ! * ( ) ' and every non-ASCII byte.
  assert.equal(goPathEscape("a-b_c.d~e$f&g+h:i=j@k"), "a-b_c.d~e$f&g+h:i=j@k");
  assert.equal(goPathEscape("équipe/1;x,y?z!*()' "), "%C3%A9quipe%2F1%3Bx%2Cy%3Fz%21%2A%28%29%27%20");
  assert.equal(keyString({ agent: "a/b", taskType: "", feature: "size", bucket: "0-1KiB" }), "a%2Fb//size/0-1KiB");
  assert.deepEqual([sizeBucket(1023), sizeBucket(1024), sizeBucket(1 << 20)], ["0-1KiB", "1-4KiB", "1MiB+"]);
  assert.deepEqual([tokenBucket(1999), tokenBucket(200_000)], ["0-2k", "200k+"]);
  assert.deepEqual([hourBucket(0), hourBucket(11), hourBucket(23), hourBucket(-1)], ["00-03", "08-11", "20-23", "20-23"]);
  assert.deepEqual([loadBucket(9n), loadBucket(10n), loadBucket(1000n)], ["0-9", "10-99", "1000+"]);
  assert.deepEqual(keys({ agent: "", taskType: "t", payloadBytes: 1, estTokens: 0, hour: 0 }), [], "no agent, no cells");
  // Deterministic for a key, scoped by tenant, beyond every real sequence.
  const a = predictedSeq("acme", "post-1");
  assert.equal(a, predictedSeq("acme", "post-1"));
  assert.notEqual(a, predictedSeq("beta", "post-1"));
  assert.ok(a >= 1n << 62n && a < 1n << 63n);
  assert.notEqual(predictedSeq("acme", ""), predictedSeq("acme", ""), "random without a key");
});
