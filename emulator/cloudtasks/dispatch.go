package cloudtasks

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Request headers the real service sets on every HTTP task dispatch.
const (
	HeaderQueueName        = "X-CloudTasks-QueueName"
	HeaderTaskName         = "X-CloudTasks-TaskName"
	HeaderRetryCount       = "X-CloudTasks-TaskRetryCount"
	HeaderExecutionCount   = "X-CloudTasks-TaskExecutionCount"
	HeaderETA              = "X-CloudTasks-TaskETA"
	HeaderPreviousResponse = "X-CloudTasks-TaskPreviousResponse"
	HeaderRetryReason      = "X-CloudTasks-TaskRetryReason"
	userAgent              = "Google-Cloud-Tasks"
)

// dispatchJob is everything one attempt needs, copied under the lock so the
// HTTP exchange runs without it.
type dispatchJob struct {
	q        *queue
	t        *task
	queueID  string
	taskID   string
	attempt  int32
	retries  int32
	execs    int32
	eta      time.Time
	prev     int
	reason   string
	deadline time.Duration
	req      *cloudtaskspb.HttpRequest
	forced   bool
}

type dispatchResult struct {
	status   int // HTTP status, 0 when no response
	err      error
	timedOut bool
	latency  time.Duration
}

// schedule is the single dispatcher loop: it starts every attempt that is
// due and allowed by its queue's state, token bucket and concurrency cap,
// then sleeps until the next due time, token, or change.
func (s *Server) schedule(ctx context.Context, wg *sync.WaitGroup) {
	for {
		s.mu.Lock()
		jobs, wait := s.dueLocked()
		s.mu.Unlock()
		for _, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := s.send(ctx, j)
				s.finish(ctx, j, res)
			}()
		}
		var timer Timer
		var fire <-chan time.Time
		if wait >= 0 {
			timer = s.clock.NewTimer(wait)
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-s.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// dueLocked starts the attempts that may go now and returns them with the
// time until the scheduler must look again (-1: only on a change).
func (s *Server) dueLocked() ([]*dispatchJob, time.Duration) {
	jobs := s.forced
	s.forced = nil
	if s.stopping {
		return jobs, -1
	}
	now := s.clock.Now()
	wait := time.Duration(-1)
	soonest := func(d time.Duration) {
		if d < 0 {
			d = 0
		}
		if wait < 0 || d < wait {
			wait = d
		}
	}
	for _, q := range s.queues {
		if q.pb.State != cloudtaskspb.Queue_RUNNING {
			continue
		}
		rl := q.pb.RateLimits
		for q.pending.Len() > 0 {
			t := q.pending[0]
			due := t.pb.ScheduleTime.AsTime()
			if due.After(now) {
				soonest(due.Sub(now))
				break
			}
			if q.running >= int(rl.MaxConcurrentDispatches) {
				break // finish() pokes the loop
			}
			if el := now.Sub(q.refilled); el > 0 {
				q.tokens = min(float64(rl.MaxBurstSize), q.tokens+el.Seconds()*rl.MaxDispatchesPerSecond)
				q.refilled = now
			}
			if q.tokens < 1 {
				soonest(time.Duration((1 - q.tokens) / rl.MaxDispatchesPerSecond * float64(time.Second)))
				break
			}
			q.tokens--
			heap.Pop(&q.pending)
			jobs = append(jobs, s.startAttemptLocked(q, t, now, false))
		}
	}
	return jobs, wait
}

// startAttemptLocked records the attempt as dispatched (and persists that,
// so a crash mid-attempt leads to another attempt, never to a lost task).
func (s *Server) startAttemptLocked(q *queue, t *task, now time.Time, forced bool) *dispatchJob {
	t.running = true
	q.running++
	pb := t.pb
	pb.DispatchCount++
	dispatched := timestamppb.New(now.Truncate(time.Microsecond))
	if pb.FirstAttempt == nil {
		pb.FirstAttempt = &cloudtaskspb.Attempt{DispatchTime: dispatched}
	}
	pb.LastAttempt = &cloudtaskspb.Attempt{ScheduleTime: pb.ScheduleTime, DispatchTime: dispatched}
	if err := s.persistLocked(taskRecord(t)); err != nil {
		s.log.Error("persist dispatch; the attempt still runs", "task", pb.Name, "error", err)
	}
	req := proto.Clone(pb.GetHttpRequest()).(*cloudtaskspb.HttpRequest)
	applyHTTPTarget(req, q.pb.GetHttpTarget())
	return &dispatchJob{
		q: q, t: t,
		queueID:  shortName(q.pb.Name),
		taskID:   shortName(pb.Name),
		attempt:  pb.DispatchCount,
		retries:  pb.DispatchCount - 1,
		execs:    t.execCount,
		eta:      pb.ScheduleTime.AsTime(),
		prev:     t.prevStatus,
		reason:   t.reason,
		deadline: pb.DispatchDeadline.AsDuration(),
		req:      req,
		forced:   forced,
	}
}

// applyHTTPTarget lays the queue-level http_target over a task's request at
// dispatch time, as the real service does: method, header overrides, the
// authorization token, and the parts of the URL uri_override names.
func applyHTTPTarget(req *cloudtaskspb.HttpRequest, ht *cloudtaskspb.HttpTarget) {
	if ht == nil {
		return
	}
	if ht.HttpMethod != cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED {
		req.HttpMethod = ht.HttpMethod
	}
	for _, h := range ht.HeaderOverrides {
		if h.GetHeader().GetKey() == "" {
			continue
		}
		if req.Headers == nil {
			req.Headers = map[string]string{}
		}
		req.Headers[h.Header.Key] = h.Header.Value
	}
	switch a := ht.AuthorizationHeader.(type) {
	case *cloudtaskspb.HttpTarget_OidcToken:
		req.AuthorizationHeader = &cloudtaskspb.HttpRequest_OidcToken{OidcToken: a.OidcToken}
	case *cloudtaskspb.HttpTarget_OauthToken:
		req.AuthorizationHeader = &cloudtaskspb.HttpRequest_OauthToken{OauthToken: a.OauthToken}
	}
	uo := ht.UriOverride
	if uo == nil || (uo.UriOverrideEnforceMode == cloudtaskspb.UriOverride_IF_NOT_EXISTS && req.Url != "") {
		return
	}
	u, err := url.Parse(req.Url)
	if err != nil {
		return // validated at creation; nothing sensible to override
	}
	switch uo.GetScheme() {
	case cloudtaskspb.UriOverride_HTTP:
		u.Scheme = "http"
	case cloudtaskspb.UriOverride_HTTPS:
		u.Scheme = "https"
	}
	host, port := u.Hostname(), u.Port()
	if uo.Host != nil {
		host = uo.GetHost()
	}
	if uo.Port != nil {
		port = strconv.FormatInt(uo.GetPort(), 10)
	}
	u.Host = host
	if port != "" {
		u.Host = net.JoinHostPort(host, port)
	}
	if uo.PathOverride != nil {
		u.Path, u.RawPath = uo.PathOverride.Path, ""
	}
	if uo.QueryOverride != nil {
		u.RawQuery = uo.QueryOverride.QueryParams
	}
	req.Url = u.String()
}

// send performs one HTTP attempt.
func (s *Server) send(ctx context.Context, j *dispatchJob) dispatchResult {
	ctx, cancel := context.WithTimeout(ctx, j.deadline)
	defer cancel()
	var body io.Reader
	if len(j.req.Body) > 0 {
		body = bytes.NewReader(j.req.Body)
	}
	req, err := http.NewRequestWithContext(ctx, j.req.HttpMethod.String(), "http://placeholder/", body)
	if err != nil {
		return dispatchResult{err: fmt.Errorf("build request: %w", err)}
	}
	req.URL = targetURL(j.req.Url)
	req.Host = req.URL.Host
	for k, v := range j.req.Headers {
		if !ignoredHeader(k) {
			req.Header[k] = []string{v} // as the caller wrote the name: the service keeps its case
		}
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderQueueName, j.queueID)
	req.Header.Set(HeaderTaskName, j.taskID)
	req.Header.Set(HeaderRetryCount, strconv.Itoa(int(j.retries)))
	req.Header.Set(HeaderExecutionCount, strconv.Itoa(int(j.execs)))
	req.Header.Set(HeaderETA, strconv.FormatFloat(float64(j.eta.UnixNano())/1e9, 'f', 6, 64))
	if j.retries > 0 {
		if j.prev > 0 {
			req.Header.Set(HeaderPreviousResponse, strconv.Itoa(j.prev))
		}
		// Recorded: present on every retry, and empty (after a 503 and
		// after a 404 alike); why the attempt failed stays in the task's
		// last_attempt.response_status.
		req.Header[HeaderRetryReason] = []string{""}
	}
	switch {
	case j.req.GetOidcToken() != nil:
		o := j.req.GetOidcToken()
		aud := o.Audience
		if aud == "" {
			aud = j.req.Url
		}
		// Tokens are checked by verifiers on the wall clock, so they are
		// stamped with it even under a fake scheduling clock.
		tok, err := s.signer.idToken(o.ServiceAccountEmail, aud, time.Now())
		if err != nil {
			return dispatchResult{err: err}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	case j.req.GetOauthToken() != nil:
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		req.Header.Set("Authorization", "Bearer ya29.emulator-"+hex.EncodeToString(b))
	}
	start := time.Now()
	resp, err := s.httpClient.Do(req)
	lat := time.Since(start)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return dispatchResult{timedOut: true, err: err, latency: lat}
		}
		return dispatchResult{err: err, latency: lat}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return dispatchResult{status: resp.StatusCode, latency: lat}
}

// splitURL splits "scheme://rest" for an http or https scheme (any case).
func splitURL(raw string) (scheme, rest string, ok bool) {
	scheme, rest, ok = strings.Cut(raw, "://")
	scheme = strings.ToLower(scheme)
	return scheme, rest, ok && (scheme == "http" || scheme == "https")
}

// targetURL is the URL a task is sent to. One url.Parse accepts is used as
// parsed; any other (an invalid escape the service let through) keeps its
// path and query byte for byte as the request target, which the target
// then judges, as it would the real service's request.
func targetURL(raw string) *url.URL {
	if u, err := url.Parse(raw); err == nil {
		return u
	}
	scheme, rest, _ := splitURL(raw)
	rest, _, _ = strings.Cut(rest, "#")
	host, path := rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		host, path = rest[:i], rest[i:]
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
	}
	return &url.URL{Scheme: scheme, Host: host, Opaque: path}
}

// ignoredHeader lists the task headers the real service drops or replaces.
func ignoredHeader(k string) bool {
	k = http.CanonicalHeaderKey(k)
	switch k {
	case "Host", "Content-Length", "User-Agent", "Authorization":
		return true
	}
	return strings.HasPrefix(k, "X-Google-") || strings.HasPrefix(k, "X-Appengine-") || strings.HasPrefix(k, "X-Cloudtasks-")
}

// finish records the outcome of an attempt: a 2xx deletes the task; any
// other outcome reschedules it per its retry config, or deletes it once
// retries are exhausted.
func (s *Server) finish(ctx context.Context, j *dispatchJob, res dispatchResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.poke()
	j.q.running--
	t := j.t
	t.running = false
	live := s.queues[j.q.pb.Name] == j.q && j.q.tasks[j.taskID] == t
	if (ctx.Err() != nil || s.stopping) && res.status == 0 {
		// Cancelled by the shutdown, not failed: the attempt stays recorded
		// as dispatched without a response and is made again on the next
		// start. A response that did arrive is still recorded below.
		return
	}
	now := s.clock.Now()
	outcome := "deleted_during_attempt"
	if live {
		outcome = s.recordOutcomeLocked(j, res, now)
	}
	attrs := []any{
		slog.String("queue", j.queueID), slog.String("task", j.taskID),
		slog.Int("attempt", int(j.attempt)), slog.Int("status", res.status),
		slog.Float64("latency_ms", float64(res.latency.Microseconds())/1000),
		slog.Float64("lateness_ms", float64(now.Sub(j.eta).Microseconds())/1000-float64(res.latency.Microseconds())/1000),
		slog.String("outcome", outcome), slog.Bool("forced", j.forced),
	}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	s.log.Info("dispatch", attrs...)
}

func (s *Server) recordOutcomeLocked(j *dispatchJob, res dispatchResult, now time.Time) string {
	q, t := j.q, j.t
	pb := t.pb
	pb.LastAttempt.ResponseTime = timestamppb.New(now.Truncate(time.Microsecond))
	pb.LastAttempt.ResponseStatus = responseStatus(res)
	if res.status > 0 {
		pb.ResponseCount++
		if res.status < 500 {
			t.execCount++
		}
	}
	if res.status >= 200 && res.status < 300 {
		if err := s.persistLocked(record{Op: opDelTask, Name: pb.Name, Until: now.Add(s.reservation)}); err != nil {
			s.log.Error("persist completion; the task may run again after a restart", "task", pb.Name, "error", err)
		}
		s.removeTaskLocked(q, t, now)
		return "success"
	}
	rc := effectiveRetry(q.pb.RetryConfig, pb.RetryConfig)
	if retriesExhausted(rc, pb.DispatchCount, pb.FirstAttempt.DispatchTime.AsTime(), now) {
		if err := s.persistLocked(record{Op: opDelTask, Name: pb.Name, Until: now.Add(s.reservation)}); err != nil {
			s.log.Error("persist exhaustion", "task", pb.Name, "error", err)
		}
		s.removeTaskLocked(q, t, now)
		return "retries_exhausted"
	}
	t.prevStatus = res.status
	t.reason = retryReason(res)
	pb.ScheduleTime = timestamppb.New(now.Add(RetryDelay(rc, int(pb.DispatchCount-1))).Truncate(time.Microsecond))
	if err := s.persistLocked(taskRecord(t)); err != nil {
		s.log.Error("persist retry", "task", pb.Name, "error", err)
	}
	heap.Push(&q.pending, t)
	return "retry"
}

// effectiveRetry lays a task-level retry config over its queue's.
func effectiveRetry(queueRC, taskRC *cloudtaskspb.RetryConfig) *cloudtaskspb.RetryConfig {
	out := proto.Clone(withRetryDefaults(queueRC)).(*cloudtaskspb.RetryConfig)
	if taskRC == nil {
		return out
	}
	if taskRC.MaxAttempts != 0 {
		out.MaxAttempts = taskRC.MaxAttempts
	}
	if taskRC.MaxRetryDuration != nil {
		out.MaxRetryDuration = taskRC.MaxRetryDuration
	}
	if taskRC.MinBackoff != nil {
		out.MinBackoff = taskRC.MinBackoff
	}
	if taskRC.MaxBackoff != nil {
		out.MaxBackoff = taskRC.MaxBackoff
	}
	if taskRC.MaxDoublings != 0 {
		out.MaxDoublings = taskRC.MaxDoublings
	}
	return out
}

func retryReason(res dispatchResult) string {
	switch {
	case res.timedOut:
		return "DEADLINE_EXCEEDED"
	case res.status > 0:
		return "HTTP " + strconv.Itoa(res.status) + " " + http.StatusText(res.status)
	default:
		return "UNAVAILABLE: no response"
	}
}

func responseStatus(res dispatchResult) *spb.Status {
	switch {
	case res.timedOut:
		return &spb.Status{Code: int32(code.Code_DEADLINE_EXCEEDED), Message: "dispatch deadline exceeded"}
	case res.status == 0:
		msg := "no response"
		if res.err != nil {
			msg = res.err.Error()
		}
		return &spb.Status{Code: int32(code.Code_UNAVAILABLE), Message: msg}
	}
	return &spb.Status{Code: int32(httpToCode(res.status)), Message: fmt.Sprintf("HTTP %d %s", res.status, http.StatusText(res.status))}
}

// httpToCode is Google's HTTP-to-canonical-code mapping.
func httpToCode(st int) code.Code {
	switch {
	case st >= 200 && st < 300:
		return code.Code_OK
	case st == 400:
		return code.Code_INVALID_ARGUMENT
	case st == 401:
		return code.Code_UNAUTHENTICATED
	case st == 403:
		return code.Code_PERMISSION_DENIED
	case st == 404:
		return code.Code_NOT_FOUND
	case st == 409:
		return code.Code_ABORTED
	case st == 412:
		return code.Code_FAILED_PRECONDITION
	case st == 416:
		return code.Code_OUT_OF_RANGE
	case st == 429:
		return code.Code_RESOURCE_EXHAUSTED
	case st == 499:
		return code.Code_CANCELLED
	case st == 501:
		return code.Code_UNIMPLEMENTED
	case st == 503:
		return code.Code_UNAVAILABLE
	case st == 504:
		return code.Code_DEADLINE_EXCEEDED
	case st >= 400 && st < 500:
		return code.Code_FAILED_PRECONDITION
	case st >= 500:
		return code.Code_INTERNAL
	}
	return code.Code_UNKNOWN
}

var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func validateHTTPRequest(hr *cloudtaskspb.HttpRequest) error {
	if hr == nil {
		return invalid("task.http_request is required")
	}
	if hr.Url == "" {
		return invalid(msgURLRequired)
	}
	if len(hr.Url) > maxURLLength {
		return invalidf("HttpRequest.url must be at most %d characters.", maxURLLength)
	}
	// The service checks the scheme, not the escapes: a URL Go's url.Parse
	// refuses ("http://example.com/%zz") is accepted and sent as written.
	if _, rest, ok := splitURL(hr.Url); !ok || rest == "" || strings.HasPrefix(rest, "/") {
		return invalid(msgURLScheme)
	}
	switch hr.HttpMethod {
	case cloudtaskspb.HttpMethod_HTTP_METHOD_UNSPECIFIED, cloudtaskspb.HttpMethod_POST, cloudtaskspb.HttpMethod_PUT, cloudtaskspb.HttpMethod_PATCH:
	case cloudtaskspb.HttpMethod_GET, cloudtaskspb.HttpMethod_HEAD, cloudtaskspb.HttpMethod_DELETE, cloudtaskspb.HttpMethod_OPTIONS:
		if len(hr.Body) > 0 {
			return invalidf("http_request.body is allowed only with POST, PUT or PATCH, not %s", hr.HttpMethod)
		}
	default:
		return invalidf("http_request.http_method %v is not valid", hr.HttpMethod)
	}
	size := 0
	for k, v := range hr.Headers {
		if !headerNameRE.MatchString(k) || strings.ContainsAny(v, "\r\n") {
			return invalidf("http_request.headers: invalid header %q", k)
		}
		size += len(k) + len(v)
	}
	if size > maxHeadersSize {
		return invalidf("http_request.headers total %d bytes, more than %d", size, maxHeadersSize)
	}
	if o := hr.GetOidcToken(); o != nil && o.ServiceAccountEmail == "" {
		return invalid("http_request.oidc_token.service_account_email is required")
	}
	if o := hr.GetOauthToken(); o != nil && o.ServiceAccountEmail == "" {
		return invalid("http_request.oauth_token.service_account_email is required")
	}
	return nil
}

// copyPath copies the field at a dotted update_mask path from src to dst.
func copyPath(dst, src proto.Message, path string) error {
	d, sr := dst.ProtoReflect(), src.ProtoReflect()
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		fd := d.Descriptor().Fields().ByName(protoreflect.Name(seg))
		if fd == nil {
			return fmt.Errorf("update_mask path %q: unknown field %q", path, seg)
		}
		if i == len(segs)-1 {
			if sr.Has(fd) {
				d.Set(fd, sr.Get(fd))
			} else {
				d.Clear(fd)
			}
			return nil
		}
		if fd.Message() == nil || fd.IsList() || fd.IsMap() {
			return fmt.Errorf("update_mask path %q: %q is not a message", path, seg)
		}
		d = d.Mutable(fd).Message()
		sr = sr.Get(fd).Message()
	}
	return nil
}

var stateFilterRE = regexp.MustCompile(`^\s*state\s*[:=]\s*([A-Z_]+)\s*$`)

func parseStateFilter(f string) (cloudtaskspb.Queue_State, error) {
	if strings.TrimSpace(f) == "" {
		return cloudtaskspb.Queue_STATE_UNSPECIFIED, nil
	}
	m := stateFilterRE.FindStringSubmatch(f)
	if m == nil {
		return 0, fmt.Errorf("filter %q not supported; use \"state: RUNNING|PAUSED|DISABLED\"", f)
	}
	v, ok := cloudtaskspb.Queue_State_value[m[1]]
	if !ok || v == 0 {
		return 0, fmt.Errorf("filter %q: unknown state %q", f, m[1])
	}
	return cloudtaskspb.Queue_State(v), nil
}
