package cloudtasks

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The real service's answers, word for word where they were recorded
// through the official client (docs/cloudtasks-emulator.md lists the ones
// that were not). Callers should match on the code, never on these texts;
// the emulator copies them so that a log line or a test expectation written
// against it reads as it will in production.
const (
	msgQueueNotFound  = "Queue does not exist. If you just created the queue, wait at least a minute for the queue to initialize."
	msgNotFound       = "Requested entity was not found."
	msgTaskGone       = "The task no longer exists, though a task with this name existed recently. The task either successfully completed or was deleted."
	msgQueueExists    = "Queue already exists"
	msgTaskExists     = "Requested entity already exists"
	msgQueueTombstone = "The queue cannot be created because a queue with this name existed too recently."
	msgQueueName      = `Queue name must be formatted: "projects/<PROJECT_ID>/locations/<LOCATION_ID>/queues/<QUEUE_ID>".`
	msgTaskIDFormat   = `Task ID "%s" can contain only letters ([A-Za-z]), numbers ([0-9]), hyphens (-), or underscores (_). Task ID must between 1 and 500 characters.`
	msgURLRequired    = "HttpRequest.url is required."
	msgURLScheme      = "HttpTarget.url must start with 'http://' or 'https://'."
	msgOtherQueue     = "The queue name from request ('%s') must be the same as the queue name in the named task ('%s')."

	msgRateNegative        = "RateLimits.maxDispatchesPerSecond cannot be negative."
	msgRateTooHigh         = "RateLimits.maxDispatchesPerSecond must be less than or equal to 500."
	msgConcurrencyNegative = "RateLimits.maxConcurrentDispatches cannot be negative."
	msgConcurrencyTooHigh  = "RateLimits.maxConcurrentDispatches must be less than or equal to 5000."
	msgMaxAttempts         = "RetryConfig.maxAttempts must be greater or equal to -1."
	msgMaxDoublings        = "RetryConfig.maxDoublings cannot be negative."
	msgMinAboveMax         = "RetryConfig.minBackoff must be less than or equal to RetryConfig.maxBackoff."

	// Not recorded; written in the style of the recorded ones.
	msgLocationName = `Location name must be formatted: "projects/<PROJECT_ID>/locations/<LOCATION_ID>".`
	msgTaskName     = `Task name must be formatted: "projects/<PROJECT_ID>/locations/<LOCATION_ID>/queues/<QUEUE_ID>/tasks/<TASK_ID>".`
)

// Reference pages the Help details of name errors point to.
const (
	helpQueueName = "https://cloud.google.com/tasks/docs/reference/rpc/google.cloud.tasks.v2#google.cloud.tasks.v2.Queue.FIELDS.string.google.cloud.tasks.v2.Queue.name"
	helpTaskName  = "https://cloud.google.com/tasks/docs/reference/rpc/google.cloud.tasks.v2#google.cloud.tasks.v2.Task.FIELDS.string.google.cloud.tasks.v2.Task.name"
)

// errWithHelp is an INVALID_ARGUMENT carrying a google.rpc.Help detail, as
// the real service answers a malformed queue name or task id.
func errWithHelp(msg, description, url string) error {
	st := status.New(codes.InvalidArgument, msg)
	if withHelp, err := st.WithDetails(&errdetails.Help{Links: []*errdetails.Help_Link{{Description: description, Url: url}}}); err == nil {
		st = withHelp
	}
	return st.Err()
}

func invalid(msg string) error { return status.Error(codes.InvalidArgument, msg) }

func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func errQueueName() error {
	return errWithHelp(msgQueueName, "Queue.name", helpQueueName)
}

func errTaskID(id string) error {
	return errWithHelp(fmtTaskID(id), "Task.name", helpTaskName)
}
