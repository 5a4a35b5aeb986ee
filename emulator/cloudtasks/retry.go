package cloudtasks

import (
	"math"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Defaults the real service fills in for a queue created without them
// (what `gcloud tasks queues describe` shows for a fresh queue).
const (
	DefaultMaxAttempts             = 100
	DefaultMinBackoff              = 100 * time.Millisecond
	DefaultMaxBackoff              = time.Hour
	DefaultMaxDoublings            = 16
	DefaultMaxDispatchesPerSecond  = 500.0
	DefaultMaxBurstSize            = 100
	DefaultMaxConcurrentDispatches = 1000

	maxDispatchesPerSecondLimit  = 500
	maxConcurrentDispatchesLimit = 5000
)

// RetryDelay is how long after the failure of attempt number retry+1 the
// task is scheduled again, per RetryConfig: min_backoff, doubled
// max_doublings times, then growing linearly by the last doubled interval,
// never above max_backoff. With min 10s, max 300s and 3 doublings that is
// 10s, 20s, 40s, 80s, 160s, 240s, 300s, 300s, ... (retry = 0, 1, 2, ...).
// Zero fields of rc take the service defaults.
func RetryDelay(rc *cloudtaskspb.RetryConfig, retry int) time.Duration {
	rc = withRetryDefaults(rc)
	minB, maxB := rc.GetMinBackoff().AsDuration(), rc.GetMaxBackoff().AsDuration()
	d := int(rc.GetMaxDoublings())
	if retry < 0 {
		retry = 0
	}
	var delay float64
	if retry <= d {
		delay = float64(minB) * math.Pow(2, float64(retry))
	} else {
		step := float64(minB) * math.Pow(2, float64(d))
		delay = step + float64(retry-d)*step
	}
	if delay > float64(maxB) || math.IsInf(delay, 0) {
		return maxB
	}
	return time.Duration(delay)
}

// retriesExhausted reports whether a task that has been attempted attempts
// times, the first at first, may not be tried again at now. The service stops
// only when both limits are met; -1 attempts or a zero duration lift one.
func retriesExhausted(rc *cloudtaskspb.RetryConfig, attempts int32, first, now time.Time) bool {
	rc = withRetryDefaults(rc)
	maxDur := rc.GetMaxRetryDuration().AsDuration()
	durationDone := maxDur > 0 && now.Sub(first) >= maxDur
	if rc.GetMaxAttempts() == -1 {
		return durationDone
	}
	attemptsDone := attempts >= rc.GetMaxAttempts()
	return attemptsDone && (maxDur == 0 || durationDone)
}

// withRetryDefaults returns rc with unset fields at the service defaults;
// rc itself is not modified.
func withRetryDefaults(rc *cloudtaskspb.RetryConfig) *cloudtaskspb.RetryConfig {
	out := &cloudtaskspb.RetryConfig{}
	if rc != nil {
		out = proto.Clone(rc).(*cloudtaskspb.RetryConfig)
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.MinBackoff == nil || out.MinBackoff.AsDuration() == 0 {
		out.MinBackoff = durationpb.New(DefaultMinBackoff)
	}
	if out.MaxBackoff == nil || out.MaxBackoff.AsDuration() == 0 {
		out.MaxBackoff = durationpb.New(DefaultMaxBackoff)
	}
	if out.MaxDoublings == 0 {
		out.MaxDoublings = DefaultMaxDoublings
	}
	if out.MaxRetryDuration == nil {
		out.MaxRetryDuration = durationpb.New(0)
	}
	return out
}

func validateRetryConfig(rc *cloudtaskspb.RetryConfig) error {
	if rc == nil {
		return nil
	}
	if rc.MaxAttempts < -1 {
		return invalid(msgMaxAttempts)
	}
	if rc.MaxDoublings < 0 {
		return invalid(msgMaxDoublings)
	}
	for _, f := range []struct {
		name string
		d    *durationpb.Duration
	}{{"minBackoff", rc.MinBackoff}, {"maxBackoff", rc.MaxBackoff}, {"maxRetryDuration", rc.MaxRetryDuration}} {
		if f.d == nil {
			continue
		}
		if err := f.d.CheckValid(); err != nil || f.d.AsDuration() < 0 {
			return invalid("RetryConfig." + f.name + " cannot be negative.")
		}
	}
	full := withRetryDefaults(rc)
	if full.MinBackoff.AsDuration() > full.MaxBackoff.AsDuration() {
		return invalid(msgMinAboveMax)
	}
	return nil
}

// withRateDefaults fills unset rate limits. max_burst_size is output only:
// whatever the caller sent is ignored (as the real service does) and the
// burst derived from the rate, 100 at the default 500/s.
func withRateDefaults(rl *cloudtaskspb.RateLimits) *cloudtaskspb.RateLimits {
	out := &cloudtaskspb.RateLimits{}
	if rl != nil {
		out = proto.Clone(rl).(*cloudtaskspb.RateLimits)
	}
	if out.MaxDispatchesPerSecond == 0 {
		out.MaxDispatchesPerSecond = DefaultMaxDispatchesPerSecond
	}
	if out.MaxConcurrentDispatches == 0 {
		out.MaxConcurrentDispatches = DefaultMaxConcurrentDispatches
	}
	out.MaxBurstSize = int32(min(DefaultMaxBurstSize, max(1, math.Ceil(out.MaxDispatchesPerSecond))))
	return out
}

func validateRateLimits(rl *cloudtaskspb.RateLimits) error {
	switch {
	case rl == nil:
		return nil
	case rl.MaxDispatchesPerSecond < 0 || math.IsNaN(rl.MaxDispatchesPerSecond):
		return invalid(msgRateNegative)
	case rl.MaxDispatchesPerSecond > maxDispatchesPerSecondLimit:
		return invalid(msgRateTooHigh)
	case rl.MaxConcurrentDispatches < 0:
		return invalid(msgConcurrencyNegative)
	case rl.MaxConcurrentDispatches > maxConcurrentDispatchesLimit:
		return invalid(msgConcurrencyTooHigh)
	}
	return nil
}
