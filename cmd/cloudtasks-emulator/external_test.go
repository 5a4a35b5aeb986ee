package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/jsdlq/jsdlq/emulator/cloudtasks"
	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// TestExternalEmulator drives an emulator started separately, e.g.
//
//	go run ./cmd/cloudtasks-emulator --host-port=127.0.0.1:8123 --data-dir /tmp/x &
//	CLOUD_TASKS_EMULATOR_HOST=127.0.0.1:8123 go test ./cmd/cloudtasks-emulator -run External -v
//
// It is skipped when CLOUD_TASKS_EMULATOR_HOST is unset.
func TestExternalEmulator(t *testing.T) {
	opts := clientopt.CloudTasksOptions(os.Getenv(cloudtasks.EnvHost)) // nil when unset
	if opts == nil {
		t.Skip(cloudtasks.EnvHost + " not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := ctapi.NewClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	jwks, err := clientopt.CloudTasksJWKSURL(os.Getenv(cloudtasks.EnvHost))
	if err != nil {
		t.Fatal(err)
	}
	parent, id := "projects/smoke/locations/local", fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	defer client.DeleteQueue(context.Background(), &cloudtaskspb.DeleteQueueRequest{Name: parent + "/queues/" + id})
	dispatchVerified(t, ctx, client, parent, id, "sa@smoke.iam.gserviceaccount.com", jwks)
}
