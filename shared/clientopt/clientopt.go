// Package clientopt builds the client options that point Google Cloud clients
// at local emulators. It is the client side only, small enough for deployed
// code: the emulators themselves live under /emulator, which production never
// links. The hosts come from shared/config (CLOUD_TASKS_EMULATOR_HOST,
// PUBSUB_EMULATOR_HOST); an empty host means the real service.
package clientopt

import (
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// CloudTasksOptions are the options that make cloudtasks.NewClient talk to
// the Cloud Tasks emulator at host (plaintext gRPC, no credentials), or nil
// when host is empty. The Go client honours no emulator variable itself.
func CloudTasksOptions(host string) []option.ClientOption {
	if host == "" {
		return nil
	}
	return plaintext(host)
}

// PubSubOptions are the options that make pubsub.NewClient talk to the
// Pub/Sub emulator at host, or nil when host is empty. They are explicit,
// rather than left to the library's own reading of PUBSUB_EMULATOR_HOST, so
// the configured host wins over the process environment.
func PubSubOptions(host string) []option.ClientOption {
	if host == "" {
		return nil
	}
	return append(plaintext(host), option.WithTelemetryDisabled())
}

func plaintext(host string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(host),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}
