package event

// Reason codes (docs/policy.md, "Reason codes"): why a task died, the code of
// a failure record (Failure.Code) or a TERM reason. The default triage policy
// (shared/triage/default.yaml, its reasons) is the registry and the source:
// every code it names is a constant here and every constant is a code it
// names (a test holds the two together), so Go code writes and compares
// codes through these names, never as literals. The taxonomy is extensible:
// an agent may send a code the registry does not have; the policy then
// categorises it as unknown.
const (
	// Transient.
	ReasonLLMProviderTimeout    = "llm_provider_timeout"
	ReasonLLMProviderRateLimit  = "llm_provider_rate_limit"
	ReasonNetworkTransient      = "network_transient"
	ReasonGithubAPIRateLimit    = "github_api_rate_limit"
	ReasonGKENodePreemption     = "gke_node_preemption"
	ReasonTimeout               = "timeout"
	ReasonDependencyUnavailable = "dependency_unavailable"
	ReasonNoWorkers             = "no_workers"
	ReasonStoreLockBusy         = "store_lock_busy"
	ReasonMaxSchedulingRetries  = "max_scheduling_retries"

	// Conditionally recoverable: replayed with a strategy that changes the task.
	ReasonContextWindowOverflow = "context_window_overflow"
	ReasonHallucinationLoop     = "hallucination_loop"
	ReasonTokenBudgetExceeded   = "token_budget_exceeded"
	ReasonModelConfusion        = "model_confusion"

	// Permanent.
	ReasonAuthorityExceeded = "authority_exceeded"
	ReasonImpossibleTask    = "impossible_task"
	ReasonDependencyRemoved = "dependency_removed"
	ReasonDataIntegrity     = "data_integrity"

	// Poison: the payload or its mapping is broken.
	ReasonSchemaInvalid          = "schema_invalid"
	ReasonParseError             = "parse_error"
	ReasonPayloadUnmarshalFailed = "payload_unmarshal_failed"
	ReasonToolContractMismatch   = "tool_contract_mismatch"
	ReasonNoPoolMapping          = "no_pool_mapping"

	// Governance.
	ReasonDenied                 = "denied"
	ReasonSafetyDenied           = "safety_denied"
	ReasonApprovalRequired       = "approval_required"
	ReasonPolicySnapshotMismatch = "policy_snapshot_mismatch"

	// Uncertain side effects.
	ReasonPartialExternalWrite = "partial_external_write"
	ReasonUnknownCommitState   = "unknown_commit_state"

	// jsdlq's own findings: the server's TERMs (ServerTermReasons), a task
	// published where no consumer listens (reconcile's consumer-filter audit),
	// a task the predictions sent to the DLQ before its first attempt
	// (agentkit's pre-flight), and a failure nothing explains.
	ReasonStreamLimitDeleted      = "stream_limit_deleted"
	ReasonUnackedDeleted          = "unacked_deleted"
	ReasonConsumerFilterRejection = "consumer_filter_rejection"
	ReasonPredictedFailure        = "predicted_failure"
	ReasonUnknown                 = "unknown"
)

// ServerTermReasons are the reasons nats-server itself gives when it
// terminates a message (an advisory's reason, as it writes it), by the
// reason code each means. They are facts of the server, not policy: the
// triage engine recognises them whatever a policy's patterns say, and
// classify never waits for an agent's record of such a message.
var ServerTermReasons = map[string]string{
	ReasonStreamLimitDeleted: "Message deleted by stream limits",
	ReasonUnackedDeleted:     "Unacknowledged message was deleted",
}
