// Package predict learns from the fleet's own history which tasks are likely
// to die, and why, before their first attempt. It is pure (no I/O): the
// store keeps its counters, statistics and model; agentkit's Publish looks a
// task up in the model; the learner (reconcile) folds counts and deaths into
// Stats and calls Learn.
//
// A task is described by Features; each feature puts it into one bucket
// (its payload size class, its hour-of-day block, ...). Stats count, per
// agent, task type and bucket, how many tasks were published and how many
// of them died and with which reason code. Learn turns the cells with enough
// support into Predictions: the probability of death, a confidence (the
// Wilson lower bound of that probability) and the dominant reason.
package predict

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Features of a task known before its first attempt.
type Features struct {
	Agent    string
	TaskType string
	// PayloadBytes is the size of the task's payload.
	PayloadBytes int
	// EstTokens is the publisher's estimate of the tokens the task needs
	// (event.HeaderEstimatedTokens); 0 when it gave none.
	EstTokens int
	// Hour is the UTC hour of day (0-23) the task was published.
	Hour int
	// Pending is the number of the agent's tasks waiting in the work stream
	// at publish, meaningful when PendingKnown.
	Pending      uint64
	PendingKnown bool
}

// Feature names (Key.Feature).
const (
	// FeatureAll is the agent and task type as a whole (its one bucket BucketAll).
	FeatureAll    = "all"
	FeatureSize   = "size"
	FeatureTokens = "tokens"
	FeatureHour   = "hour"
	FeatureLoad   = "load"
)

// BucketAll is the one bucket of FeatureAll.
const BucketAll = "all"

// Key names one cell of the statistics: a bucket of one feature of the
// tasks of one agent and task type.
type Key struct {
	Agent    string `json:"agent" firestore:"agent"`
	TaskType string `json:"task_type" firestore:"task_type"`
	Feature  string `json:"feature" firestore:"feature"`
	Bucket   string `json:"bucket" firestore:"bucket"`
}

// ErrKey: a string is not an encoded Key.
var ErrKey = errors.New("predict: malformed key")

// String encodes k as "<agent>/<type>/<feature>/<bucket>", each part
// path-escaped, so that any agent or type name round-trips (ParseKey).
func (k Key) String() string {
	return url.PathEscape(k.Agent) + "/" + url.PathEscape(k.TaskType) + "/" + url.PathEscape(k.Feature) + "/" +
		url.PathEscape(k.Bucket)
}

// ParseKey reverses Key.String.
func ParseKey(s string) (Key, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return Key{}, fmt.Errorf("%w: %q has %d parts, want 4", ErrKey, s, len(parts))
	}
	var out [4]string
	for i, p := range parts {
		v, err := url.PathUnescape(p)
		if err != nil {
			return Key{}, fmt.Errorf("%w: %q: %v", ErrKey, s, err)
		}
		out[i] = v
	}
	k := Key{Agent: out[0], TaskType: out[1], Feature: out[2], Bucket: out[3]}
	if k.Agent == "" || k.Feature == "" || k.Bucket == "" {
		return Key{}, fmt.Errorf("%w: %q needs an agent, a feature and a bucket", ErrKey, s)
	}
	return k, nil
}

// Keys returns the cells a task with features f counts in: the agent and
// type as a whole, its size, hour and (when known) token and load buckets.
// A task without an agent is in none: the predictions are per agent.
func (f Features) Keys() []Key { return f.appendKeys(make([]Key, 0, maxKeys)) }

// maxKeys is the most cells a task counts in.
const maxKeys = 5

func (f Features) appendKeys(keys []Key) []Key {
	if f.Agent == "" {
		return keys
	}
	k := func(feature, bucket string) Key {
		return Key{Agent: f.Agent, TaskType: f.TaskType, Feature: feature, Bucket: bucket}
	}
	keys = append(keys, k(FeatureAll, BucketAll), k(FeatureSize, SizeBucket(f.PayloadBytes)), k(FeatureHour, HourBucket(f.Hour)))
	if f.EstTokens > 0 {
		keys = append(keys, k(FeatureTokens, TokenBucket(f.EstTokens)))
	}
	if f.PendingKnown {
		keys = append(keys, k(FeatureLoad, LoadBucket(f.Pending)))
	}
	return keys
}

// bound is a bucket of a quantity: the values below its upper bound
// (exclusive) that no earlier bucket of its list takes.
type bound struct {
	below int
	name  string
}

// bucketOf is the first of bounds that n lies below, or beyond when it lies
// below none.
func bucketOf(bounds []bound, n int, beyond string) string {
	for _, b := range bounds {
		if n < b.below {
			return b.name
		}
	}
	return beyond
}

// sizeBounds are the upper bounds (exclusive) of the size buckets: each
// bucket is four times the previous one, so a bucket's tasks are alike in
// size whatever the fleet's payloads are.
var sizeBounds = []bound{
	{1 << 10, "0-1KiB"}, {4 << 10, "1-4KiB"}, {16 << 10, "4-16KiB"}, {64 << 10, "16-64KiB"},
	{256 << 10, "64-256KiB"}, {1 << 20, "256KiB-1MiB"},
}

// SizeBucket is the size bucket of a payload of n bytes.
func SizeBucket(n int) string { return bucketOf(sizeBounds, n, "1MiB+") }

// tokenBounds follow the context windows models have (8k, 32k, 128k, 200k).
var tokenBounds = []bound{
	{2_000, "0-2k"}, {8_000, "2k-8k"}, {32_000, "8k-32k"}, {128_000, "32k-128k"}, {200_000, "128k-200k"},
}

// TokenBucket is the bucket of an estimate of n tokens.
func TokenBucket(n int) string { return bucketOf(tokenBounds, n, "200k+") }

// HourBucket is the four-hour block of the UTC hour h ("08-11"); hours out
// of 0-23 are taken modulo 24.
func HourBucket(h int) string {
	h = ((h % 24) + 24) % 24
	from := h / 4 * 4
	return fmt.Sprintf("%02d-%02d", from, from+3)
}

// LoadBucket is the decade of the agent's pending tasks ("0-9", "10-99",
// "100-999", "1000+").
func LoadBucket(pending uint64) string {
	switch {
	case pending < 10:
		return "0-9"
	case pending < 100:
		return "10-99"
	case pending < 1000:
		return "100-999"
	default:
		return "1000+"
	}
}

// ParseCount reads a non-negative header count ("123"); ok is false for
// anything else, so a malformed header means "unknown", never a bucket.
func ParseCount(s string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 63)
	return n, err == nil
}
