package cloudtasks

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Resource name grammar of google.cloud.tasks.v2 (see the Task.name and
// Queue.name field documentation).
var (
	projectRE  = regexp.MustCompile(`^[A-Za-z0-9:.-]+$`)
	locationRE = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
	queueIDRE  = regexp.MustCompile(`^[A-Za-z0-9-]{1,100}$`)
	taskIDRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,500}$`)
)

// parseLocation checks "projects/P/locations/L"; its errors are gRPC
// statuses, as the service answers them.
func parseLocation(s string) error {
	p := strings.Split(s, "/")
	if len(p) != 4 || p[0] != "projects" || p[2] != "locations" || !projectRE.MatchString(p[1]) || !locationRE.MatchString(p[3]) {
		return status.Error(codes.InvalidArgument, msgLocationName)
	}
	return nil
}

// parseQueueName checks "projects/P/locations/L/queues/Q" and returns Q.
func parseQueueName(s string) (string, error) {
	p := strings.Split(s, "/")
	if len(p) != 6 || p[4] != "queues" || parseLocation(strings.Join(p[:4], "/")) != nil || !queueIDRE.MatchString(p[5]) {
		return "", errQueueName()
	}
	return p[5], nil
}

// parseTaskName checks ".../queues/Q/tasks/T" and returns the queue's full
// name and T.
func parseTaskName(s string) (queue, id string, err error) {
	i := strings.LastIndex(s, "/tasks/")
	if i < 0 {
		return "", "", status.Error(codes.InvalidArgument, msgTaskName)
	}
	queue, id = s[:i], s[i+len("/tasks/"):]
	if _, err := parseQueueName(queue); err != nil {
		return "", "", err
	}
	if !taskIDRE.MatchString(id) {
		return "", "", errTaskID(id)
	}
	return queue, id, nil
}

func fmtTaskID(id string) string { return fmt.Sprintf(msgTaskIDFormat, id) }

func shortName(full string) string { return full[strings.LastIndex(full, "/")+1:] }

// newTaskID makes an id shaped like the real service's generated ones: a
// long decimal number, unguessable so it never collides with a reservation.
func newTaskID() string {
	n, err := rand.Int(rand.Reader, new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil))
	if err != nil {
		panic(fmt.Sprintf("cloudtasks: crypto/rand failed: %v", err))
	}
	return fmt.Sprintf("%020d", n)
}
