// Package tasksemu is what clients need to use the project's Cloud Tasks
// emulator (emulator/cloudtasks): the endpoint options that point the official
// client at it, and verification of the OIDC tokens it signs. Deployed code
// (classify, replay, reconcile) imports this small package, never the
// emulator itself, which stays out of the function bundle.
package tasksemu

import (
	"google.golang.org/api/option"

	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// EnvHost names the variable that points the project's Cloud Tasks clients
// at the emulator; the Go client itself honours no emulator variable.
const EnvHost = "CLOUD_TASKS_EMULATOR_HOST"

// DefaultHostPort is where the emulator listens unless told otherwise.
const DefaultHostPort = "127.0.0.1:8123"

// ClientOptions are the options that make cloudtasks.NewClient talk to the
// emulator at hostPort: plaintext gRPC, no credentials (nil for an empty
// hostPort). They are built in one place, shared/clientopt, for every client.
func ClientOptions(hostPort string) []option.ClientOption {
	return clientopt.CloudTasksOptions(hostPort)
}
