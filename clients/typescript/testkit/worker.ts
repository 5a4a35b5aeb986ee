// worker is a child process for the keep-alive tests (test/keepalive.test.ts):
// it takes the next delivery of the consumer "backend", runs it with once
// under the agent name worker-a, prints "started" once its work begins and
// then works until it is killed. The test kills it (SIGKILL) mid-task: it
// never completes, releases or settles anything.
//
//   node dist/testkit/worker.js <firestore project>

import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

import { Kit, taskOf } from "../src/index.js";
import { firestore, natsURL } from "./env.js";

const project = process.argv[2];
if (!project) throw new Error("usage: worker.js <firestore project>");
const nc = await connect({ servers: natsURL() });
const kit = new Kit(nc, { agent: "worker-a", firestore: firestore(project) });
const c = await jetstream(nc).consumers.get("TASKS", "backend");
const m = await c.next({ expires: 30_000 });
if (!m) throw new Error("no delivery");
await kit.once(taskOf(m), async (signal) => {
  process.stdout.write("started\n");
  await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
});
