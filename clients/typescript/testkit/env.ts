// The servers the tests run against: a nats-server with JetStream (NATS_URL)
// and the Firestore emulator (FIRESTORE_EMULATOR_HOST), both started by the
// Go test that runs `npm test` (internal/kitcompat) on free loopback ports.

import { randomBytes } from "node:crypto";
import { Firestore } from "@google-cloud/firestore";
import {
  AckPolicy, jetstream, jetstreamManager, RetentionPolicy,
  type ConsumerConfig, type JetStreamClient, type JetStreamManager, type JsMsg,
} from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, nanos, type NatsConnection, type Subscription } from "@nats-io/transport-node";

export function natsURL(): string {
  const u = process.env.NATS_URL;
  if (!u) throw new Error("NATS_URL is not set: run the tests through go test ./internal/kitcompat (or make test)");
  return u;
}

export function firestore(projectId = "ts-" + randomBytes(6).toString("hex")): Firestore {
  if (!process.env.FIRESTORE_EMULATOR_HOST) {
    throw new Error("FIRESTORE_EMULATOR_HOST is not set: run the tests through go test ./internal/kitcompat (or make test)");
  }
  // On the emulator there is no metadata server to ask for credentials.
  process.env.METADATA_SERVER_DETECTION ??= "none";
  // A project of its own (by default) keeps this run's documents apart in
  // the shared emulator.
  return new Firestore({ projectId });
}

export interface Fixture {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** Sees every ack, NAK and TERM the agents send (subject $JS.ACK.>). */
  acks: AckLog;
  close(): Promise<void>;
}

/** AckLog collects the acknowledgements sent for deliveries of the work stream ("+ACK", "-NAK", "+WPI", "+TERM …"). */
export class AckLog {
  readonly payloads: string[] = [];
  private readonly sub: Subscription;
  constructor(private readonly monitor: NatsConnection) {
    // A callback runs as the message is read, before a later PONG resolves
    // a flush: sync sees everything sent before it.
    this.sub = monitor.subscribe("$JS.ACK.TASKS.>", { callback: (_err, m) => { this.payloads.push(m.string()); } });
  }
  /** sync returns once every ack the agent connection sent before it has been seen. */
  async sync(agent: NatsConnection): Promise<void> {
    await agent.flush();
    await this.monitor.flush();
  }
  /** kinds counts the acknowledgements seen by kind ("+ACK", "+WPI", …). */
  kinds(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const p of this.payloads) {
      const k = p.split(" ")[0]!;
      out[k] = (out[k] ?? 0) + 1;
    }
    return out;
  }
  stop(): void {
    this.sub.unsubscribe();
  }
}

/**
 * fixture connects and makes a clean JetStream: TASKS (agents.>, the given
 * retention) with the consumer "backend" (MaxDeliver 3, BackOff 100 ms,
 * 200 ms, or the consumer settings given), and, with dlq, the record stream
 * and the failure bucket the bridge creates.
 */
export async function fixture(opts: { dlq: boolean; retention?: RetentionPolicy; consumer?: Partial<ConsumerConfig> }): Promise<Fixture> {
  const nc = await connect({ servers: natsURL() });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  for await (const name of jsm.streams.names()) await jsm.streams.delete(name);
  await jsm.streams.add({ name: "TASKS", subjects: ["agents.>"], retention: opts.retention ?? RetentionPolicy.Workqueue });
  await jsm.consumers.add("TASKS", opts.consumer ? { durable_name: "backend", ack_policy: AckPolicy.Explicit, ...opts.consumer } : {
    durable_name: "backend", ack_policy: AckPolicy.Explicit, max_deliver: 3, ack_wait: nanos(30_000),
    backoff: [nanos(100), nanos(200)],
  });
  if (opts.dlq) {
    await jsm.streams.add({ name: "DLQ_RECORDS", subjects: ["dlq.records.>"], duplicate_window: nanos(2 * 60 * 60 * 1000) });
    await new Kvm(js).create("dlq_failures", { history: 1 });
  }
  const monitor = await connect({ servers: natsURL() });
  const acks = new AckLog(monitor);
  await monitor.flush();
  return {
    nc, js, jsm, acks,
    async close() {
      acks.stop();
      await monitor.close();
      await nc.close();
    },
  };
}

/** next is the next delivery to the consumer "backend", or a failed test. */
export async function next(js: JetStreamClient, expiresMs = 5000): Promise<JsMsg> {
  const c = await js.consumers.get("TASKS", "backend");
  const m = await c.next({ expires: expiresMs });
  if (!m) throw new Error(`no delivery within ${expiresMs} ms`);
  return m;
}

/**
 * waitFor asks probe until it returns a value and throws, naming what it
 * awaited, once timeoutMs have passed: a test waits on servers that settle
 * in their own time, never without bound.
 */
export async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`after ${timeoutMs} ms: still waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
