package cloudtasks

import (
	"fmt"
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
		return fmt.Errorf("retry_config.max_attempts must be >= -1, got %d", rc.MaxAttempts)
	}
	if rc.MaxDoublings < 0 {
		return fmt.Errorf("retry_config.max_doublings must be >= 0, got %d", rc.MaxDoublings)
	}
	for name, d := range map[string]*durationpb.Duration{"min_backoff": rc.MinBackoff, "max_backoff": rc.MaxBackoff, "max_retry_duration": rc.MaxRetryDuration} {
		if d == nil {
			continue
		}
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return fmt.Errorf("retry_config.%s must be a non-negative duration", name)
		}
	}
	full := withRetryDefaults(rc)
	if full.MinBackoff.AsDuration() > full.MaxBackoff.AsDuration() {
		return fmt.Errorf("retry_config.min_backoff (%v) must not exceed max_backoff (%v)", full.MinBackoff.AsDuration(), full.MaxBackoff.AsDuration())
	}
	return nil
}

// withRateDefaults fills unset rate limits. max_burst_size is output only in
// the real API; the emulator derives it from the rate (100 at the default
// 500/s) unless the caller set one, which it honours.
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
	if out.MaxBurstSize == 0 {
		out.MaxBurstSize = int32(min(DefaultMaxBurstSize, max(1, math.Ceil(out.MaxDispatchesPerSecond))))
	}
	return out
}

func validateRateLimits(rl *cloudtaskspb.RateLimits) error {
	if rl == nil {
		return nil
	}
	if rl.MaxDispatchesPerSecond < 0 || rl.MaxDispatchesPerSecond > maxDispatchesPerSecondLimit || math.IsNaN(rl.MaxDispatchesPerSecond) {
		return fmt.Errorf("rate_limits.max_dispatches_per_second must be in (0, %d], got %v", maxDispatchesPerSecondLimit, rl.MaxDispatchesPerSecond)
	}
	if rl.MaxConcurrentDispatches < 0 || rl.MaxConcurrentDispatches > maxConcurrentDispatchesLimit {
		return fmt.Errorf("rate_limits.max_concurrent_dispatches must be in [1, %d], got %d", maxConcurrentDispatchesLimit, rl.MaxConcurrentDispatches)
	}
	if rl.MaxBurstSize < 0 {
		return fmt.Errorf("rate_limits.max_burst_size must not be negative, got %d", rl.MaxBurstSize)
	}
	return nil
}
