package stack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrMissingPrerequisite is returned when a tool the local stack needs is not
// installed; the message says how to install it.
var ErrMissingPrerequisite = errors.New("stack: missing prerequisite")

// CheckGcloudEmulators verifies that gcloud, Java and both emulator
// components are installed, reporting everything missing at once.
func CheckGcloudEmulators() error {
	var errs []error
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: gcloud is not on PATH; install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install)", ErrMissingPrerequisite))
	}
	if _, err := exec.LookPath("java"); err != nil {
		errs = append(errs, fmt.Errorf("%w: java is not on PATH; the emulators need Java 11+ (for example: apt-get install openjdk-17-jre-headless)", ErrMissingPrerequisite))
	}
	if gcloud != "" {
		root := sdkRoot(gcloud)
		for _, c := range []struct{ dir, component string }{
			{"cloud-firestore-emulator", "cloud-firestore-emulator"},
			{"pubsub-emulator", "pubsub-emulator"},
		} {
			if _, err := os.Stat(filepath.Join(root, "platform", c.dir)); err != nil {
				errs = append(errs, fmt.Errorf("%w: the gcloud component %s is not installed; run: gcloud components install %s (or apt-get install google-cloud-cli-%s)",
					ErrMissingPrerequisite, c.component, c.component, strings.TrimPrefix(c.component, "cloud-")))
			}
		}
	}
	return errors.Join(errs...)
}

// sdkRoot finds the Cloud SDK root from the gcloud binary (…/bin/gcloud,
// possibly behind a symlink as in the Debian package).
func sdkRoot(gcloud string) string {
	if real, err := filepath.EvalSymlinks(gcloud); err == nil {
		gcloud = real
	}
	root := filepath.Dir(filepath.Dir(gcloud))
	if _, err := os.Stat(filepath.Join(root, "platform")); err == nil {
		return root
	}
	for _, alt := range []string{"/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/google-cloud-sdk"} {
		if _, err := os.Stat(filepath.Join(alt, "platform")); err == nil {
			return alt
		}
	}
	return root
}

// SDKRoot is the installed Cloud SDK's root ("" when gcloud is not found).
func SDKRoot() string {
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		return ""
	}
	return sdkRoot(gcloud)
}

// The emulators are started through the SDK's own launch scripts, not through
// `gcloud emulators … start`: gcloud moves the emulator into a process group of
// its own (setpgid), so stopping the group we started would leave the Java
// server holding the port.

// FirestoreEmulator is the Firestore emulator (native mode) on addr. It keeps
// its data in memory only.
func FirestoreEmulator(addr, logFile string) Spec {
	host, port, _ := net.SplitHostPort(addr)
	return Spec{
		Name:      "firestore",
		Path:      filepath.Join(SDKRoot(), "platform", "cloud-firestore-emulator", "cloud_firestore_emulator"),
		Args:      []string{"start", "--host=" + host, "--port=" + port, "--database-mode=firestore-native"},
		Addr:      addr,
		ReadyPath: "/",
		LogFile:   logFile,
	}
}

// PubSubEmulator is the Pub/Sub emulator on addr. It keeps no state across a
// restart (gcloud's --data-dir is not passed to it either): whoever uses it
// must create topics and subscriptions again after a restart.
func PubSubEmulator(addr, logFile string) Spec {
	host, port, _ := net.SplitHostPort(addr)
	return Spec{
		Name:      "pubsub",
		Path:      filepath.Join(SDKRoot(), "platform", "pubsub-emulator", "bin", "cloud-pubsub-emulator"),
		Args:      []string{"--host=" + host, "--port=" + port},
		Addr:      addr,
		ReadyPath: "/",
		LogFile:   logFile,
	}
}

// ClassifyPushEndpoint is the push endpoint of the subscription that
// delivers topic (projects/P/topics/T) to Classify on the functions host at
// addr. The topic's name in the path is what the functions framework
// expects of a push endpoint; the host (cmd/functions) hands such a push to
// Classify as the CloudEvent Eventarc delivers in production.
func ClassifyPushEndpoint(addr, topic string) string {
	return "http://" + addr + "/Classify/" + topic
}

// ClassifySubscription is the push subscription name that delivers topic to
// Classify on the functions host at addr as Terraform deploys it by default:
// a 60 s ack deadline, redeliveries backing off from 10 s to 600 s, and
// dead letters to deadTopic after 10 attempts. Local stacks create it with
// these settings so that what they show of redelivery is what production
// does.
func ClassifySubscription(name, topic, deadTopic, addr string) *pubsubpb.Subscription {
	return &pubsubpb.Subscription{Name: name, Topic: topic,
		PushConfig:         &pubsubpb.PushConfig{PushEndpoint: ClassifyPushEndpoint(addr, topic)},
		AckDeadlineSeconds: 60,
		RetryPolicy:        &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(10 * time.Second), MaximumBackoff: durationpb.New(600 * time.Second)},
		DeadLetterPolicy:   &pubsubpb.DeadLetterPolicy{DeadLetterTopic: deadTopic, MaxDeliveryAttempts: 10},
	}
}
