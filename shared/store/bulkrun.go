package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/authority"
)

// This file holds bulk-runs: the console's bulk redrives. A run's whole
// state lives here, not in the console process that works on it: the
// filter, the plan it was confirmed on, the keyset cursor and counters
// (RedriveProgress, the same record dlqctl keeps in its checkpoint file)
// and a lease. A console instance claims a run by taking its lease and
// renews it while it works; when the instance dies the lease expires and
// another one (or the same one restarted) claims the run and continues
// after the cursor.

// BulkRuns is the collection of bulk redrive runs, one document per run.
const BulkRuns = "bulk-runs"

// BulkState is where a bulk run stands.
type BulkState string

// Bulk run states. Planned, running and cancelling are live (a runner
// works on them, or will); the others are final.
const (
	BulkPlanned    BulkState = "planned"    // confirmed, no runner has claimed it yet
	BulkRunning    BulkState = "running"    // a runner works on it under its lease
	BulkCancelling BulkState = "cancelling" // cancel asked; the runner stops at the next entry
	BulkCancelled  BulkState = "cancelled"
	BulkDone       BulkState = "done"
	BulkFailed     BulkState = "failed"
)

// Live reports whether a runner works (or will work) on a run in state s.
func (s BulkState) Live() bool {
	return s == BulkPlanned || s == BulkRunning || s == BulkCancelling
}

var liveBulkStates = []string{string(BulkPlanned), string(BulkRunning), string(BulkCancelling)}

// BulkFilter is what a bulk run selects: the equality filters and the
// created_at range of Query. The console's bulk runs store it in Firestore,
// dlqctl's redrive checkpoints as JSON (whose names for the range, since
// and until, checkpoints already on disk use).
type BulkFilter struct {
	Tenant      string    `firestore:"tenant,omitempty" json:"tenant,omitempty"`
	Status      Status    `firestore:"status,omitempty" json:"status,omitempty"`
	Category    string    `firestore:"category,omitempty" json:"category,omitempty"`
	Reason      string    `firestore:"reason,omitempty" json:"reason,omitempty"`
	Agent       string    `firestore:"agent,omitempty" json:"agent,omitempty"`
	TaskType    string    `firestore:"task_type,omitempty" json:"task_type,omitempty"`
	CreatedFrom time.Time `firestore:"created_from,omitempty" json:"since,omitzero"`
	CreatedTo   time.Time `firestore:"created_to,omitempty" json:"until,omitzero"`
	// FoldCase: Tenant and Agent match whatever their case (Query.FoldCase).
	FoldCase bool `firestore:"fold_case,omitempty" json:"fold_case,omitempty"`
}

// BulkFilterOf is the filter of query q (its order, view, page and limit
// are a run's own).
func BulkFilterOf(q Query) BulkFilter {
	return BulkFilter{Tenant: q.Tenant, Status: q.Status, Category: q.Category, Reason: q.Reason, Agent: q.Agent, TaskType: q.TaskType,
		CreatedFrom: q.CreatedFrom, CreatedTo: q.CreatedTo, FoldCase: q.FoldCase}
}

// Query is the filter as a query, newest first (the order a redrive's
// cursor is made in).
func (f BulkFilter) Query() Query {
	return Query{Tenant: f.Tenant, Status: f.Status, Category: f.Category, Reason: f.Reason, Agent: f.Agent, TaskType: f.TaskType,
		CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo, FoldCase: f.FoldCase, Order: NewestFirst}
}

// RedrivePlan is what a redrive will do, worked out before it acts
// (shared/redrive computes it): the entries it meets, what it does with
// each, and what the three gates will then do with the replays it asks
// for, as things stood when it was planned.
type RedrivePlan struct {
	Matched    int            `firestore:"matched" json:"matched"`
	ByTenant   map[string]int `firestore:"by_tenant" json:"by_tenant"`
	ByCategory map[string]int `firestore:"by_category" json:"by_category"`
	ByStatus   map[string]int `firestore:"by_status" json:"by_status"`

	// The actions.
	Approve int `firestore:"approve" json:"approve"`
	RunNow  int `firestore:"run_now" json:"run_now"`
	// Left alone: held by their breaker, excluded (rule -> entries: its
	// rule keeps approval for approvers, and the redrive was not opted
	// into those), not permitted (rule -> entries: the actor's role may
	// not act on them), nothing to do in their status.
	Held     int            `firestore:"held" json:"held"`
	Excluded map[string]int `firestore:"excluded" json:"excluded"`
	Denied   map[string]int `firestore:"denied,omitempty" json:"denied,omitempty"`
	Nothing  int            `firestore:"nothing" json:"nothing"`

	// The gates, for the entries acted on, in the order replay asks them:
	// completed (idempotency record: recovered, not published), stopped by
	// the policy (status -> entries), held by an open breaker (tenant ->
	// replays), a half-open breaker's probe, published.
	Completed   int            `firestore:"completed" json:"completed"`
	PolicyStops map[string]int `firestore:"policy_stops" json:"policy_stops"`
	BreakerHeld map[string]int `firestore:"breaker_held" json:"breaker_held"`
	Probes      int            `firestore:"probes" json:"probes"`
	Replays     int            `firestore:"replays" json:"replays"`
}

// Acts is how many entries the redrive acts on.
func (p RedrivePlan) Acts() int { return p.Approve + p.RunNow }

// LeftAlone is how many entries the redrive passes without acting: held by
// their breaker, excluded for want of an opt-in, not permitted, nothing to
// do.
func (p RedrivePlan) LeftAlone() int { return p.Held + p.Nothing + sum(p.Excluded) + sum(p.Denied) }

// PolicyStopped is how many of the replays the current policy stops.
func (p RedrivePlan) PolicyStopped() int { return sum(p.PolicyStops) }

// BreakerHolds is how many of the replays an open breaker holds.
func (p RedrivePlan) BreakerHolds() int { return sum(p.BreakerHeld) }

// Ranked is the names of a plan's counts (ByTenant, PolicyStops, ...)
// largest first, then by name: the order dlqctl and the console show them in.
func Ranked(m map[string]int) []string {
	return slices.SortedFunc(maps.Keys(m), func(x, y string) int {
		return cmp.Or(cmp.Compare(m[y], m[x]), strings.Compare(x, y))
	})
}

// RedrivePending is the entry a redrive is about to act on, written ahead
// of the action: its position, the action and its updated_at as listed.
type RedrivePending struct {
	At        Cursor    `firestore:"at" json:"at"`
	Action    string    `firestore:"action" json:"action"`
	UpdatedAt time.Time `firestore:"updated_at" json:"updated_at"`
}

// RedriveProgress is how far a redrive got. Its size does not grow with
// the work done: the query is ordered, so the keyset cursor of the last
// entry passed says everything up to it is done, the counters say how it
// went, and Pending names the one entry a crash can leave undecided.
type RedriveProgress struct {
	Cursor    Cursor          `firestore:"cursor" json:"cursor,omitzero"`
	Pending   *RedrivePending `firestore:"pending" json:"pending,omitempty"`
	Seen      int             `firestore:"seen" json:"seen"` // entries passed: acted on, skipped or left alone
	Approved  int             `firestore:"approved" json:"approved"`
	RunNow    int             `firestore:"run_now" json:"run_now"`
	Skipped   int             `firestore:"skipped" json:"skipped"`       // changed since listed: not ours to redo
	Failed    int             `firestore:"failed" json:"failed"`         // the action returned an error
	LeftAlone int             `firestore:"left_alone" json:"left_alone"` // held, excluded, nothing to do
}

// BulkRun is one bulk redrive of the console.
type BulkRun struct {
	ID      string     `firestore:"-"`
	Filter  BulkFilter `firestore:"filter"`
	Include []string   `firestore:"include"` // opt-ins (redrive.OptInApproverRules)
	Rate    float64    `firestore:"rate_per_second"`
	Actor   string     `firestore:"actor"` // who confirmed it; every action is taken in their name
	// Role is the role Actor confirmed it in, and every action is taken
	// in ("" in runs confirmed before roles existed: operator).
	Role   authority.Role `firestore:"role,omitempty"`
	Reason string         `firestore:"reason"`
	State  BulkState      `firestore:"state"`
	// Plan is the plan the actor confirmed; Total its Matched.
	Plan     RedrivePlan     `firestore:"plan"`
	Total    int             `firestore:"total"`
	Progress RedriveProgress `firestore:"progress"`
	// LeaseOwner is the console instance working on the run until
	// LeaseUntil ("" when none).
	LeaseOwner  string    `firestore:"lease_owner"`
	LeaseUntil  time.Time `firestore:"lease_until"`
	Error       string    `firestore:"error,omitempty"` // why it failed
	CancelledBy string    `firestore:"cancelled_by,omitempty"`
	CreatedAt   time.Time `firestore:"created_at"`
	StartedAt   time.Time `firestore:"started_at,omitempty"`
	UpdatedAt   time.Time `firestore:"updated_at"`
	FinishedAt  time.Time `firestore:"finished_at,omitempty"`
}

// bulkRunIDBytes: a run id is 32 hex digits, random.
const bulkRunIDBytes = 16

// CheckBulkRunID refuses anything but an id CreateBulkRun makes, so a
// forged id never reaches Firestore as a path.
func CheckBulkRunID(id string) error {
	if len(id) != 2*bulkRunIDBytes {
		return fmt.Errorf("%w: bulk run id %q", ErrBadID, id)
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: bulk run id %q", ErrBadID, id)
		}
	}
	return nil
}

func (s *Store) bulkRef(id string) *firestore.DocumentRef { return s.fs.Collection(BulkRuns).Doc(id) }

// CreateBulkRun stores r as a new planned run and sets its id.
func (s *Store) CreateBulkRun(ctx context.Context, r *BulkRun) error {
	b := make([]byte, bulkRunIDBytes)
	_, _ = rand.Read(b)
	now := s.Now()
	r.ID, r.State, r.CreatedAt, r.UpdatedAt = hex.EncodeToString(b), BulkPlanned, now, now
	r.LeaseOwner, r.LeaseUntil = "", time.Time{}
	s.wrote(1)
	if _, err := s.bulkRef(r.ID).Create(ctx, r); err != nil {
		return fmt.Errorf("firestore create %s/%s: %w", BulkRuns, r.ID, err)
	}
	return nil
}

// GetBulkRun reads a run: ErrBadID for an id CreateBulkRun cannot have
// made, ErrNotFound for one that does not exist.
func (s *Store) GetBulkRun(ctx context.Context, id string) (*BulkRun, error) {
	if err := CheckBulkRunID(id); err != nil {
		return nil, err
	}
	return getDoc(ctx, s, s.bulkRef(id), "bulk run", decodeBulkRun)
}

func decodeBulkRun(snap *firestore.DocumentSnapshot) (*BulkRun, error) {
	return decodeDoc(snap, func(r *BulkRun) *string { return &r.ID })
}

// ListBulkRuns returns the newest runs, at most limit.
func (s *Store) ListBulkRuns(ctx context.Context, limit int) ([]*BulkRun, error) {
	return queryDocs(ctx, s, s.fs.Collection(BulkRuns).OrderBy("created_at", firestore.Desc).Limit(limit), BulkRuns, decodeBulkRun)
}

// ClaimBulkRun takes the lease of one live run that no instance holds (none
// yet, released, or expired) for owner until now+ttl, and returns it
// (running now, unless it was cancelling); nil when there is none. The
// claim is a transaction that checks the lease again, so two instances
// never both hold one run.
func (s *Store) ClaimBulkRun(ctx context.Context, owner string, ttl time.Duration) (*BulkRun, error) {
	// The live runs are few (each is a human's confirmed bulk action);
	// the lease is checked here rather than in the query, which would
	// need a composite index on state and lease_until.
	snaps, err := queryAll(ctx, s, s.fs.Collection(BulkRuns).Where("state", "in", liveBulkStates).Limit(100), "live "+BulkRuns)
	if err != nil {
		return nil, err
	}
	for _, snap := range snaps {
		cand, err := decodeBulkRun(snap)
		if err != nil {
			return nil, err
		}
		if !leaseFree(cand.LeaseOwner, cand.LeaseUntil, owner, s.Now()) {
			continue
		}
		got, err := claimDoc(ctx, s, s.bulkRef(cand.ID), "bulk run", "claim bulk run "+cand.ID, decodeBulkRun, func(r *BulkRun, now time.Time) (bool, error) {
			if !r.State.Live() || !leaseFree(r.LeaseOwner, r.LeaseUntil, owner, now) {
				return false, nil
			}
			r.LeaseOwner, r.LeaseUntil, r.UpdatedAt = owner, now.Add(ttl), now
			if r.State == BulkPlanned {
				r.State, r.StartedAt = BulkRunning, now
			}
			return true, nil
		})
		if err != nil || got != nil {
			return got, err
		}
	}
	return nil, nil
}

// UpdateBulkRun changes run id in a transaction on behalf of owner, who
// must hold its lease (ErrLeaseLost otherwise, nothing written): fn
// gets the stored run and changes it; an error from fn aborts the change.
func (s *Store) UpdateBulkRun(ctx context.Context, id, owner string, fn func(r *BulkRun) error) (*BulkRun, error) {
	if err := CheckBulkRunID(id); err != nil {
		return nil, err
	}
	return updateDoc(ctx, s, s.bulkRef(id), "bulk run", "update bulk run "+id, decodeBulkRun, func(r *BulkRun, now time.Time) (bool, error) {
		if r.LeaseOwner != owner {
			return false, fmt.Errorf("%w: %s holds bulk run %s", ErrLeaseLost, r.LeaseOwner, id)
		}
		if err := fn(r); err != nil {
			return false, err
		}
		r.UpdatedAt = now
		return true, nil
	})
}

// CancelBulkRun asks run id to stop: a planned run (no runner has it) is
// cancelled at once, a running one becomes cancelling and its runner stops
// at the next entry. Cancelling a run that is cancelling or cancelled
// again changes nothing; a finished run is ErrWrongStatus.
func (s *Store) CancelBulkRun(ctx context.Context, id, by string) (*BulkRun, error) {
	if err := CheckBulkRunID(id); err != nil {
		return nil, err
	}
	return updateDoc(ctx, s, s.bulkRef(id), "bulk run", "cancel bulk run "+id, decodeBulkRun, func(r *BulkRun, now time.Time) (bool, error) {
		switch r.State {
		case BulkCancelling, BulkCancelled:
			return false, nil
		case BulkPlanned:
			r.State, r.FinishedAt, r.LeaseOwner, r.LeaseUntil = BulkCancelled, now, "", time.Time{}
		case BulkRunning:
			r.State = BulkCancelling
		default:
			return false, fmt.Errorf("%w: bulk run %s is %s", ErrWrongStatus, id, r.State)
		}
		r.CancelledBy, r.UpdatedAt = by, now
		return true, nil
	})
}
