// Package clientopt builds the client options that point Google Cloud clients
// at local emulators. It is the client side only, small enough for deployed
// code: the emulators themselves live under /emulator, which production never
// links. The hosts come from shared/config (CLOUD_TASKS_EMULATOR_HOST,
// PUBSUB_EMULATOR_HOST); an empty host means the real service.
package clientopt

import (
	"fmt"
	"net"
	"strconv"

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

// CloudTasksJWKSPath is where the Cloud Tasks emulator publishes the keys of
// the OIDC tokens it signs.
const CloudTasksJWKSPath = "/jwks.json"

// CloudTasksJWKSURL is where a client of the Cloud Tasks emulator at host
// finds those keys: the JWKS listener the emulator pairs with its gRPC
// address by default (CloudTasksJWKSHostPort); e.g. 127.0.0.1:8123 gives
// http://127.0.0.1:8124/jwks.json. AUTH_MODE=emulator verifies with them.
func CloudTasksJWKSURL(host string) (string, error) {
	hp, err := CloudTasksJWKSHostPort(host)
	if err != nil {
		return "", err
	}
	return "http://" + hp + CloudTasksJWKSPath, nil
}

// CloudTasksJWKSHostPort is the JWKS listener address paired with the Cloud
// Tasks emulator's gRPC address host: the next port on the same host (port
// 0, "any free port", stays 0).
func CloudTasksJWKSHostPort(host string) (string, error) {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		return "", fmt.Errorf("clientopt: cloud tasks emulator host-port %q: %w", host, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p >= 65535 {
		return "", fmt.Errorf("clientopt: cloud tasks emulator host-port %q: bad port", host)
	}
	if p == 0 {
		return net.JoinHostPort(h, "0"), nil
	}
	return net.JoinHostPort(h, strconv.Itoa(p+1)), nil
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
