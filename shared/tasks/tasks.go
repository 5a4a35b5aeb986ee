// Package tasks schedules replays in Cloud Tasks (docs/contracts.md, "The
// replay task"): one HTTP task per replay attempt of an entry, named
// deterministically so that scheduling the same attempt twice is harmless
// (ALREADY_EXISTS counts as success) and a name is never reused for another
// attempt.
package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jsdlq/jsdlq/shared/clientopt"
)

// Limits of Cloud Tasks.
const (
	MaxNameLen       = 500
	MaxScheduleAhead = 30 * 24 * time.Hour
)

// HeaderTaskName is the header Cloud Tasks (and its emulator) sets on every
// dispatch: the task id, without the queue path.
const HeaderTaskName = "X-CloudTasks-TaskName"

// ErrBadName is returned by ParseName for names this package did not make.
var ErrBadName = errors.New("tasks: not a replay task name")

// Config is where tasks go.
type Config struct {
	Queue          string // projects/P/locations/L/queues/Q
	ReplayURL      string // the replay function; also the OIDC audience
	ServiceAccount string // the identity Cloud Tasks mints the OIDC token for
	// EmulatorHost (CLOUD_TASKS_EMULATOR_HOST) points the client at the
	// local emulator: plaintext, no credentials.
	EmulatorHost string
}

// Body is the JSON body of a replay task.
type Body struct {
	EntryID string `json:"entry_id"`
	Attempt int    `json:"attempt"`
}

// Scheduler creates and deletes replay tasks. Its client is built on first
// use, once.
type Scheduler struct {
	cfg    Config
	now    func() time.Time
	client *Client
}

// Client is a Cloud Tasks client made on first use, once, so that building
// a component that may never create a task does no network work. The
// Scheduler and notify's webhook queue each hold one.
type Client struct {
	get   func() (*ctapi.Client, error)
	built atomic.Bool
}

// NewClient returns the client of the emulator at emulatorHost, or of
// Cloud Tasks when it is ""; opts are added to the client's options.
func NewClient(emulatorHost string, opts ...option.ClientOption) *Client {
	copts := append(clientopt.CloudTasksOptions(emulatorHost), opts...)
	c := &Client{}
	c.get = sync.OnceValues(func() (*ctapi.Client, error) {
		c.built.Store(true)
		cl, err := ctapi.NewClient(context.Background(), copts...)
		if err != nil {
			return nil, fmt.Errorf("tasks: cloud tasks client: %w", err)
		}
		return cl, nil
	})
	return c
}

// Get makes the client on the first call and returns it; a failure to make
// it is returned by every call.
func (c *Client) Get() (*ctapi.Client, error) { return c.get() }

// RunTask runs a task now (operator.Runner: a replay run at once), making
// the client on first use.
func (c *Client) RunTask(ctx context.Context, req *cloudtaskspb.RunTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	cl, err := c.get()
	if err != nil {
		return nil, err
	}
	return cl.RunTask(ctx, req, opts...)
}

// Close closes the client if it was made.
func (c *Client) Close() error {
	if !c.built.Load() {
		return nil
	}
	cl, err := c.get()
	if err != nil {
		return nil
	}
	return cl.Close()
}

// Option configures New.
type Option func(*options)

type options struct {
	now        func() time.Time
	clientOpts []option.ClientOption
}

// WithClock replaces time.Now (schedule times).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithClientOptions adds options for the Cloud Tasks client.
func WithClientOptions(opts ...option.ClientOption) Option {
	return func(o *options) { o.clientOpts = append(o.clientOpts, opts...) }
}

// New returns a Scheduler; it does no network work.
func New(cfg Config, opts ...Option) *Scheduler {
	o := options{now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	return &Scheduler{cfg: cfg, now: o.now, client: NewClient(cfg.EmulatorHost, o.clientOpts...)}
}

// Queue is the queue's full name.
func (s *Scheduler) Queue() string { return s.cfg.Queue }

// Close closes the client if it was built.
func (s *Scheduler) Close() error { return s.client.Close() }

// RunTask runs a task of the queue now (operator.Runner) on the scheduler's
// own client, so a caller that schedules and runs tasks holds one
// connection.
func (s *Scheduler) RunTask(ctx context.Context, req *cloudtaskspb.RunTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	return s.client.RunTask(ctx, req, opts...)
}

// Name is the task id of replay attempt n (1-based) of an entry:
// "<first 8 hex of sha256(entry id)>-<entry id encoded>-r<n>". The hashed
// prefix spreads consecutive ids over Cloud Tasks' key space; the encoding
// keeps only letters, digits, '-' and '_' and is reversible (ParseName). Ids
// too long to encode within 500 characters use the full sha256 instead,
// which keeps names distinct but not reversible.
func Name(entryID string, attempt int) string {
	sum := sha256.Sum256([]byte(entryID))
	prefix := hex.EncodeToString(sum[:4])
	suffix := "-r" + strconv.Itoa(attempt)
	enc := encode(entryID)
	if len(prefix)+1+len(enc)+len(suffix) > MaxNameLen {
		enc = "_h" + hex.EncodeToString(sum[:])
	}
	return prefix + "-" + enc + suffix
}

// encode maps bytes to [A-Za-z0-9-_]: '_' is the escape character.
func encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		case c == '_':
			b.WriteString("__")
		case c == '.':
			b.WriteString("_d")
		case c == '%':
			b.WriteString("_p")
		default:
			fmt.Fprintf(&b, "_x%02x", c)
		}
	}
	return b.String()
}

func decode(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return "", ErrBadName
		}
		i++
		switch s[i] {
		case '_':
			b.WriteByte('_')
		case 'd':
			b.WriteByte('.')
		case 'p':
			b.WriteByte('%')
		case 'x':
			if i+2 >= len(s) {
				return "", ErrBadName
			}
			v, err := hex.DecodeString(s[i+1 : i+3])
			if err != nil {
				return "", ErrBadName
			}
			b.WriteByte(v[0])
			i += 2
		default:
			return "", ErrBadName
		}
	}
	return b.String(), nil
}

// ParseName returns the entry id and attempt of a task id or full task name
// made by Name.
func ParseName(name string) (entryID string, attempt int, err error) {
	name = name[strings.LastIndexByte(name, '/')+1:]
	dash := strings.IndexByte(name, '-')
	r := strings.LastIndex(name, "-r")
	if dash != 8 || r <= dash {
		return "", 0, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	attempt, err = strconv.Atoi(name[r+2:])
	if err != nil || attempt < 1 {
		return "", 0, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	enc := name[dash+1 : r]
	if strings.HasPrefix(enc, "_h") {
		return "", 0, fmt.Errorf("%w: %q is hashed and cannot be reversed", ErrBadName, name)
	}
	entryID, err = decode(enc)
	if err != nil || Name(entryID, attempt) != name {
		return "", 0, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return entryID, attempt, nil
}

// FullName is the task's resource name in the configured queue.
func (s *Scheduler) FullName(taskID string) string { return s.cfg.Queue + "/tasks/" + taskID }

// Request is one replay to schedule.
type Request struct {
	EntryID string
	Attempt int       // 1-based replay attempt of the entry
	At      time.Time // when to run; clamped to [now, now+30 days]
}

// Schedule creates the replay task and returns its full name. A task of the
// same name that exists already (a retried classify) is success: created is
// false then.
func (s *Scheduler) Schedule(ctx context.Context, r Request) (name string, created bool, err error) {
	if r.EntryID == "" || r.Attempt < 1 {
		return "", false, fmt.Errorf("tasks: schedule needs an entry id and an attempt >= 1 (got %q, %d)", r.EntryID, r.Attempt)
	}
	c, err := s.client.Get()
	if err != nil {
		return "", false, err
	}
	now := s.now()
	at := r.At
	if at.Before(now) {
		at = now
	}
	// Leave a minute of slack: the service measures "30 days" on its clock.
	if limit := now.Add(MaxScheduleAhead - time.Minute); at.After(limit) {
		at = limit
	}
	body, _ := json.Marshal(Body{EntryID: r.EntryID, Attempt: r.Attempt})
	name = s.FullName(Name(r.EntryID, r.Attempt))
	created, err = CreateJSONTask(ctx, c, s.cfg.Queue, name, s.cfg.ReplayURL, s.cfg.ServiceAccount, body, at)
	if err != nil {
		return "", false, err
	}
	return name, created, nil
}

// Delete removes a task; a task that is gone already is success.
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	c, err := s.client.Get()
	if err != nil {
		return err
	}
	if !strings.Contains(name, "/") {
		name = s.FullName(name)
	}
	_, err = answer(c.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: name}), codes.NotFound, "delete "+name)
	return err
}

// Exists reports whether a task is present in the queue.
func (s *Scheduler) Exists(ctx context.Context, name string) (bool, error) {
	c, err := s.client.Get()
	if err != nil {
		return false, err
	}
	if !strings.Contains(name, "/") {
		name = s.FullName(name)
	}
	_, err = c.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
	return answer(err, codes.NotFound, "get "+name)
}

// answer turns a call's error into yes or no: OK is yes, the code no
// stands for (NotFound for a lookup, AlreadyExists for a creation) is no,
// any other error is returned, naming op.
func answer(err error, no codes.Code, op string) (bool, error) {
	switch status.Code(err) {
	case codes.OK:
		return true, nil
	case no:
		return false, nil
	}
	return false, fmt.Errorf("tasks: %s: %w", op, err)
}

// Each calls fn with the full name and schedule time of every task in the
// queue, page by page, until fn returns false or the queue is exhausted.
func (s *Scheduler) Each(ctx context.Context, fn func(name string, scheduled time.Time) bool) error {
	c, err := s.client.Get()
	if err != nil {
		return err
	}
	it := c.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: s.cfg.Queue, PageSize: 1000})
	for {
		t, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tasks: list %s: %w", s.cfg.Queue, err)
		}
		if !fn(t.GetName(), t.GetScheduleTime().AsTime()) {
			return nil
		}
	}
}

// Retryable reports whether a scheduling error may go away on retry (the
// service or network is unavailable) rather than being a request the service
// will refuse again.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal,
		codes.Aborted, codes.Unknown, codes.Canceled, codes.Unauthenticated:
		return true
	}
	return false
}

// TaskCreator is the Cloud Tasks call CreateJSONTask makes (*ctapi.Client).
type TaskCreator interface {
	CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error)
}

// CreateJSONTask creates task name (a full name) in queue: a POST of body
// (JSON) to url at at (now when zero), carrying an OIDC token of
// serviceAccount with url as its audience, the way every jsdlq task calls a
// function. created is false when a task of that name exists or existed
// recently: the name makes the creation idempotent.
func CreateJSONTask(ctx context.Context, c TaskCreator, queue, name, url, serviceAccount string, body []byte, at time.Time) (created bool, err error) {
	task := &cloudtaskspb.Task{
		Name: name,
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url:        url,
			HttpMethod: cloudtaskspb.HttpMethod_POST,
			Headers:    map[string]string{"Content-Type": "application/json"},
			Body:       body,
			AuthorizationHeader: &cloudtaskspb.HttpRequest_OidcToken{OidcToken: &cloudtaskspb.OidcToken{
				ServiceAccountEmail: serviceAccount,
				Audience:            url,
			}},
		}},
	}
	if !at.IsZero() {
		task.ScheduleTime = timestamppb.New(at)
	}
	_, err = c.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	return answer(err, codes.AlreadyExists, "create "+name)
}
