// @jsdlq/agentkit: jsdlq's agent kit for TypeScript agents on nats.js. The
// behaviour and the wire contract are the Go kit's (shared/agentkit); see
// docs/contracts.md.

export * from "./contract.js";
export * from "./budget.js";
export * from "./replay.js";
export * from "./keepalive.js";
export * from "./claim.js";
export * from "./predict.js";
export * from "./publish.js";
export * from "./triage.js";
export * from "./kit.js";
