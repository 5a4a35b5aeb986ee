// Package httpfunc builds jsdlq's HTTP functions (replay, reconcile, deliver)
// one way: configuration read at once, a Firestore client for the project,
// the handler behind the function's authentication (Cloud Tasks' or Cloud
// Scheduler's OIDC token, or the emulator's), and a configuration or client
// error logged once with every request refused 500 (obs.HTTPFunction), so
// the caller keeps its work while the deployment is fixed.
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

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/auth"
	"github.com/jsdlq/jsdlq/shared/config"
	"github.com/jsdlq/jsdlq/shared/obs"
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
// the logger. Nothing connects before the first request.
func New[C any](ctx context.Context, logs io.Writer, name string, load func() (Loaded[C], error),
	build func(cfg C, fs *firestore.Client, log *slog.Logger) (http.Handler, error)) http.Handler {
	return obs.HTTPFunction(logs, name, func() (Loaded[C], string, error) {
		l, err := load()
		return l, l.Common.Project, err
	}, func(l Loaded[C], log *slog.Logger) (http.Handler, error) {
		a, err := auth.New(l.Auth, l.Common.CloudTasksEmulatorHost, auth.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		fs, err := firestore.NewClient(ctx, l.Common.Project)
		if err != nil {
			return nil, fmt.Errorf("%s: firestore client for project %s: %w", name, l.Common.Project, err)
		}
		h, err := build(l.Config, fs, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return a.Middleware(h), nil
	})
}
