package store

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/firestore"
)

// This file is the product's own resolution figures (issue 35): counters
// of what the moves of the hour did (Metrics.Outcomes, and their copy in the
// hour's row of the day rollup), written by the transaction that makes each
// move (countMove, Record), so a figure is counted exactly when its move is
// and no figure needs a scan: per category the auto-resolved share, per
// strategy the retry success, and the time from death to a human decision
// and to recovery as a mergeable sketch (fixed log-scale buckets), from
// which any window's median and 95th percentile are read.

// Outcomes are the resolution counters of the moves made in an hour. As a
// delta only the non-zero counters are written.
type Outcomes struct {
	// Settled counts, by category, the moves into recovered or discarded;
	// Recovered those into recovered; Auto those of Recovered whose entry
	// no human (an actor with a role) ever moved.
	Settled   map[string]int64 `firestore:"settled,omitempty" json:"settled,omitempty"`
	Recovered map[string]int64 `firestore:"recovered,omitempty" json:"recovered,omitempty"`
	Auto      map[string]int64 `firestore:"auto,omitempty" json:"auto,omitempty"`
	// Replayed counts, by strategy, the replays published (moves into
	// replayed); RetryRecovered the moves from replayed into recovered:
	// replays whose task completed (its replay chain's included).
	Replayed       map[string]int64 `firestore:"replayed,omitempty" json:"replayed,omitempty"`
	RetryRecovered map[string]int64 `firestore:"retry_recovered,omitempty" json:"retry_recovered,omitempty"`
	// Claimed counts the replays the replay function took on (moves into
	// replaying); Denied those its gates sent elsewhere (from replaying
	// into held, awaiting approval, escalated, quarantined or discarded).
	Claimed int64 `firestore:"claimed,omitempty" json:"claimed,omitempty"`
	Denied  int64 `firestore:"denied,omitempty" json:"denied,omitempty"`
	// ToDecision and ToRecovery are sketches (bucket → entries) of the
	// time from an entry's death to its first move by a human, and to its
	// recovery (SketchBucket).
	ToDecision map[string]int64 `firestore:"to_decision,omitempty" json:"to_decision,omitempty"`
	ToRecovery map[string]int64 `firestore:"to_recovery,omitempty" json:"to_recovery,omitempty"`
}

// moveOutcomes are the counters of the last move of hist, a history of e
// (e's fields as the move left them): the one definition the transactions
// count by and RecountOutcomes recounts by.
func moveOutcomes(e *Entry, hist []Transition) Outcomes {
	var o Outcomes
	if len(hist) == 0 {
		return o
	}
	t := hist[len(hist)-1]
	if t.From == t.To {
		return o
	}
	human := func(ts []Transition) bool {
		return slices.ContainsFunc(ts, func(t Transition) bool { return t.Role != "" })
	}
	cat, strat := metricKey(e.Category), metricKey(e.Strategy)
	to, from := Status(t.To), Status(t.From)
	age := t.At.Sub(e.CreatedAt)
	one := func(k string) map[string]int64 { return map[string]int64{k: 1} }
	switch to {
	case Recovered:
		o.Settled, o.Recovered = one(cat), one(cat)
		if !human(hist) {
			o.Auto = one(cat)
		}
		o.ToRecovery = one(SketchBucket(age))
		if from == Replayed {
			o.RetryRecovered = one(strat)
		}
	case Discarded:
		o.Settled = one(cat)
	case Replayed:
		o.Replayed = one(strat)
	case Replaying:
		o.Claimed = 1
	}
	if MoveGate.Allows(from, to) {
		o.Denied = 1
	}
	if t.Role != "" && !human(hist[:len(hist)-1]) {
		o.ToDecision = one(SketchBucket(age))
	}
	return o
}

// sketchBuckets is how many buckets a sketch has: bucket 0 holds what
// took under a second, bucket b ≥ 1 what took [2^((b-1)/2), 2^(b/2))
// seconds (each a factor √2 wide), the last what took longer (2^31 s is
// 68 years).
const sketchBuckets = 64

// SketchBucket is the bucket of a duration in a time sketch.
func SketchBucket(d time.Duration) string {
	s := d.Seconds()
	b := 0
	if s >= 1 {
		b = min(int(math.Floor(2*math.Log2(s)))+1, sketchBuckets-1)
	}
	return fmt.Sprintf("b%02d", b)
}

// bucketBound is the upper bound of a bucket: the value a quantile that
// falls into it is reported as (at most a factor √2 above the truth).
func bucketBound(key string) (time.Duration, bool) {
	if len(key) < 2 || key[0] != 'b' {
		return 0, false
	}
	b, err := strconv.Atoi(key[1:])
	if err != nil || b < 0 || b >= sketchBuckets {
		return 0, false
	}
	return time.Duration(math.Pow(2, float64(b)/2) * float64(time.Second)).Round(time.Second), true
}

// Quantiles are a sketch's count and its median and 95th percentile.
type Quantiles struct {
	N           int64         `json:"n"`
	Median, P95 time.Duration `json:"-"`
	// MedianSeconds and P95Seconds are the same, for JSON.
	MedianSeconds float64 `json:"median_seconds"`
	P95Seconds    float64 `json:"p95_seconds"`
}

// SketchQuantiles reads a sketch's median and 95th percentile by nearest
// rank, each its bucket's upper bound.
func SketchQuantiles(sketch map[string]int64) Quantiles {
	keys := slices.SortedFunc(maps.Keys(sketch), func(a, b string) int {
		x, _ := bucketBound(a)
		y, _ := bucketBound(b)
		return cmp.Compare(x, y)
	})
	var q Quantiles
	for _, k := range keys {
		if _, ok := bucketBound(k); ok && sketch[k] > 0 {
			q.N += sketch[k]
		}
	}
	at := func(p float64) time.Duration {
		rank := int64(math.Ceil(p * float64(q.N)))
		var seen int64
		for _, k := range keys {
			bound, ok := bucketBound(k)
			if !ok || sketch[k] <= 0 {
				continue
			}
			if seen += sketch[k]; seen >= rank {
				return bound
			}
		}
		return 0
	}
	if q.N > 0 {
		q.Median, q.P95 = at(0.5), at(0.95)
		q.MedianSeconds, q.P95Seconds = q.Median.Seconds(), q.P95.Seconds()
	}
	return q
}

// fields lists o's breakdowns under their field names, in one order, for
// the code that writes, sums and compares them.
func (o *Outcomes) fields() []breakdown {
	return []breakdown{
		{"settled", &o.Settled}, {"recovered", &o.Recovered}, {"auto", &o.Auto},
		{"replayed", &o.Replayed}, {"retry_recovered", &o.RetryRecovered},
		{"to_decision", &o.ToDecision}, {"to_recovery", &o.ToRecovery},
	}
}

// Add adds p to o.
func (o *Outcomes) Add(p Outcomes) {
	o.Claimed += p.Claimed
	o.Denied += p.Denied
	mine, theirs := o.fields(), p.fields()
	for i := range mine {
		sumMap(mine[i].m, *theirs[i].m)
	}
}

// Normalized drops zero counters, so equal counts compare equal however
// they were reached.
func (o Outcomes) Normalized() Outcomes {
	for _, f := range o.fields() {
		c := maps.Clone(*f.m)
		maps.DeleteFunc(c, func(_ string, v int64) bool { return v == 0 })
		if len(c) == 0 {
			c = nil
		}
		*f.m = c
	}
	return o
}

// IsZero reports whether o counts nothing.
func (o Outcomes) IsZero() bool {
	n := o.Normalized()
	if n.Claimed != 0 || n.Denied != 0 {
		return false
	}
	for _, f := range n.fields() {
		if len(*f.m) > 0 {
			return false
		}
	}
	return true
}

// Equal reports whether o and p count the same.
func (o Outcomes) Equal(p Outcomes) bool {
	a, b := o.Normalized(), p.Normalized()
	if a.Claimed != b.Claimed || a.Denied != b.Denied {
		return false
	}
	fa, fb := a.fields(), b.fields()
	for i := range fa {
		if !maps.Equal(*fa[i].m, *fb[i].m) {
			return false
		}
	}
	return true
}

// updates are o as increments under the field "outcomes".
func (o Outcomes) updates() map[string]any {
	u := map[string]any{}
	if o.Claimed != 0 {
		u["claimed"] = firestore.Increment(o.Claimed)
	}
	if o.Denied != 0 {
		u["denied"] = firestore.Increment(o.Denied)
	}
	for _, f := range o.fields() {
		if len(*f.m) == 0 {
			continue
		}
		sub := map[string]any{}
		for k, v := range *f.m {
			sub[k] = firestore.Increment(v)
		}
		u[f.field] = sub
	}
	return u
}

// RecountOutcomes recounts the counters of every move the entries'
// histories hold, by the hour of the move (Hour): what the transactions
// counted, for the moves the histories still show (MaxHistory).
func RecountOutcomes(entries []*Entry) map[string]Outcomes {
	out := map[string]Outcomes{}
	for _, e := range entries {
		for i, t := range e.History {
			o := moveOutcomes(e, e.History[:i+1])
			if o.IsZero() {
				continue
			}
			sum := out[Hour(t.At)]
			sum.Add(o)
			out[Hour(t.At)] = sum
		}
	}
	return out
}

// Resolution are the figures a window's outcomes give.
type Resolution struct {
	// Categories are the figures of each category, by name.
	Categories map[string]CategoryFigures `json:"categories"`
	// Strategies are the replays of each strategy and their success.
	Strategies map[string]StrategyFigures `json:"strategies"`
	// Settled and Recovered are the fleet's; Recovery is Recovered over
	// Settled (-1: nothing settled).
	Settled   int64   `json:"settled"`
	Recovered int64   `json:"recovered"`
	Recovery  float64 `json:"recovery"`
	// Claimed and Denied are the replays taken on and kept back by a
	// gate; DenialRate is Denied over Claimed (-1: none claimed).
	Claimed    int64     `json:"claimed"`
	Denied     int64     `json:"denied"`
	DenialRate float64   `json:"denial_rate"`
	ToDecision Quantiles `json:"to_decision"`
	ToRecovery Quantiles `json:"to_recovery"`
}

// CategoryFigures are one category's figures.
type CategoryFigures struct {
	Settled   int64 `json:"settled"`
	Recovered int64 `json:"recovered"`
	Auto      int64 `json:"auto"`
	// AutoShare is Auto over Settled: the share resolved with no human
	// (-1: nothing settled).
	AutoShare float64 `json:"auto_share"`
}

// StrategyFigures are one strategy's figures.
type StrategyFigures struct {
	Replayed  int64 `json:"replayed"`
	Recovered int64 `json:"recovered"`
	// Success is Recovered over Replayed (-1: nothing replayed).
	Success float64 `json:"success"`
}

func share(a, b int64) float64 {
	if b <= 0 {
		return -1
	}
	return float64(a) / float64(b)
}

// Figures are o's figures.
func (o Outcomes) Figures() Resolution {
	r := Resolution{Categories: map[string]CategoryFigures{}, Strategies: map[string]StrategyFigures{},
		Claimed: o.Claimed, Denied: o.Denied, DenialRate: share(o.Denied, o.Claimed),
		ToDecision: SketchQuantiles(o.ToDecision), ToRecovery: SketchQuantiles(o.ToRecovery)}
	for _, c := range slices.Sorted(maps.Keys(o.Settled)) {
		f := CategoryFigures{Settled: o.Settled[c], Recovered: o.Recovered[c], Auto: o.Auto[c]}
		f.AutoShare = share(f.Auto, f.Settled)
		r.Categories[c] = f
		r.Settled += f.Settled
		r.Recovered += f.Recovered
	}
	for _, s := range slices.Sorted(maps.Keys(o.Replayed)) {
		f := StrategyFigures{Replayed: o.Replayed[s], Recovered: o.RetryRecovered[s]}
		f.Success = share(f.Recovered, f.Replayed)
		r.Strategies[s] = f
	}
	r.Recovery = share(r.Recovered, r.Settled)
	return r
}
