// Package httpfunc builds jsdlq's HTTP functions (replay, reconcile, deliver)
// one way, the only way: configuration read at once (every problem
// reported together), a Firestore client for the project, the handler
// behind the function's authentication (Cloud Tasks' or Cloud Scheduler's
// OIDC token, or the emulator's), and a configuration or client error logged
// once with every request refused 500 (obs.Refuse), so the caller keeps its
// work while the deployment is fixed. The deploy root calls each function's
// FromEnv once, on the first request, so clients are built lazily, once.
package httpfunc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
	"github.com/jsdlq/jsdlq/shared/store"
)

// Loaded is a function's configuration with what every function has: the
// project and emulator hosts, and who may call it.
type Loaded[C any] struct {
	Config C
	Common config.Common
	Auth   config.Auth
}

// Load reads the configuration of a function that reads what every HTTP
// function reads (config.HTTPFunction) and settings of its own: read gets
// the same Reader after the shared variables, so every problem, theirs and
// its own, is reported at once.
func Load[C any](lookup config.Lookup, read func(r *config.Reader, base config.HTTPFunction) C) (Loaded[C], error) {
	r := config.NewReader(lookup)
	base := config.ReadHTTPFunction(r)
	return Loaded[C]{Config: read(r, base), Common: base.Common, Auth: base.Auth}, r.Err()
}

// PostOnly answers 405 (Allow: POST) to any method but POST and says whether
// the request may go on: a queue posts its tasks, so anything else reaching a
// task handler is a mistake to refuse, not a task to retry. name prefixes the
// answer.
func PostOnly(w http.ResponseWriter, r *http.Request, name string) bool {
	if r.Method == http.MethodPost {
		return true
	}
	w.Header().Set("Allow", http.MethodPost)
	http.Error(w, name+": POST only", http.StatusMethodNotAllowed)
	return false
}

// ReadJSON decodes the JSON body of a task a queue delivers into v, as
// strictly as a task is read: at most max bytes, no field v does not have,
// nothing after the value. Its error says which rule the body broke.
func ReadJSON(r *http.Request, max int, v any) error {
	raw, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(raw) > max {
		return fmt.Errorf("body larger than %d bytes", max)
	}
	return DecodeStrict(raw, v)
}

// DecodeStrict decodes one JSON value from b into v: no field v does not
// have, nothing but white space after the value. Its error says which rule
// b broke.
func DecodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode body: %w", err)
	}
	// More is false before a stray '}' or ']' too: only the end of the
	// input may follow the value.
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the body")
	}
	return nil
}

// New builds function name: load reads its configuration (every problem at
// once), build makes its handler from the configuration, a Firestore client
// for the project (the emulator's when FIRESTORE_EMULATOR_HOST is set) and
// the logger; the handler is served behind the function's authentication.
// When any step fails the reason is logged once and every request is
// refused with 500 (obs.Refuse). Nothing connects before the first request.
func New[C any](ctx context.Context, logs io.Writer, name string, load func() (Loaded[C], error),
	build func(cfg C, db *store.Client, log *slog.Logger) (http.Handler, error)) http.Handler {
	log := obs.NewLogger(logs, obs.WithComponent(name))
	l, err := load()
	if err != nil {
		log.Error(name+": invalid configuration; requests are refused with 500 until it is fixed", "error", err.Error())
		return obs.Middleware(obs.Refuse(log, name, err))
	}
	log = obs.NewLogger(logs, obs.WithComponent(name), obs.WithProject(l.Common.Project))
	h, err := handler(ctx, name, l, log, build)
	if err != nil {
		log.Error(name+": cannot build clients; requests are refused with 500", "error", err.Error())
		return obs.Middleware(obs.Refuse(log, name, err))
	}
	return obs.Middleware(h)
}

// handler is the authenticated handler of a configured function.
func handler[C any](ctx context.Context, name string, l Loaded[C], log *slog.Logger,
	build func(cfg C, db *store.Client, log *slog.Logger) (http.Handler, error)) (http.Handler, error) {
	a, err := auth.New(l.Auth, l.Common.CloudTasksEmulatorHost, auth.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	db, err := store.Open(ctx, l.Common.Project)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	h, err := build(l.Config, db, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return a.Middleware(h), nil
}
