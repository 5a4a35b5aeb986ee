// Package tasksemu is what clients need to use the project's Cloud Tasks
// emulator (emulator/cloudtasks): the endpoint options that point the official
// client at it, and verification of the OIDC tokens it signs. Deployed code
// (classify, replay, reconcile) imports this small package, never the
// emulator itself, which stays out of the function bundle.
package tasksemu

import (
	"os"

	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// EnvHost names the variable that points the project's Cloud Tasks clients
// at the emulator; the Go client itself honours no emulator variable.
const EnvHost = "CLOUD_TASKS_EMULATOR_HOST"

// DefaultHostPort is where the emulator listens unless told otherwise.
const DefaultHostPort = "127.0.0.1:8123"

// ClientOptions are the options that make cloudtasks.NewClient talk to the
// emulator at hostPort: plaintext gRPC, no credentials.
func ClientOptions(hostPort string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(hostPort),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// ClientOptionsFromEnv returns ClientOptions for $CLOUD_TASKS_EMULATOR_HOST,
// or nil when it is unset (use the real service).
func ClientOptionsFromEnv() []option.ClientOption {
	hp := os.Getenv(EnvHost)
	if hp == "" {
		return nil
	}
	return ClientOptions(hp)
}
