package store

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/jsdlq/jsdlq/shared/event"
)

// This file is the tenant-hour aggregate: per tenant, what the entries
// created in one hour add up to now (their current status, how many are
// poison, when the last one died). It lives in the hourly metrics shards
// (Metrics.Tenants), so it is sharded like them and written by the same
// transactions: Record adds a new entry's part, and every status move
// (TransitionScoped, the one place entries change after their creation)
// adds the difference between the entry after and before the move. No
// path that changes an entry can forget it, and a transaction that fails
// changes neither. Reconcile reads these instead of the entries
// (shared/reconciler, tenant health and the four tenant alerts).

// SlotWidth is the resolution of the "last hour" counters: entries are
// counted per five-minute slot of their creation.
const SlotWidth = 5 * time.Minute

// TenantHour is what one tenant's entries created in one hour add up to
// now. As a delta only non-zero counters are written.
type TenantHour struct {
	// Slots counts the entries by the five-minute slot of their creation
	// ("00", "05" … "55", the slot's first minute); their sum is the
	// hour's entries of the tenant.
	Slots map[string]int64 `firestore:"slots,omitempty"`
	// PoisonSlots counts, by slot, those whose category is poison now.
	PoisonSlots map[string]int64 `firestore:"poison_slots,omitempty"`
	// Statuses counts them by their current status.
	Statuses map[string]int64 `firestore:"statuses,omitempty"`
	// QuarantinedPoison counts the poison entries now quarantined.
	QuarantinedPoison int64 `firestore:"quarantined_poison,omitempty"`
	// Duplicates counts the entries whose replay found the task completed
	// already (Entry.Duplicate).
	Duplicates int64 `firestore:"duplicates,omitempty"`
	// LastFailureMs is the latest creation among them, Unix milliseconds (a
	// maximum, not a sum: Firestore's maximum transform takes numbers).
	LastFailureMs int64 `firestore:"last_failure_ms,omitempty"`
}

// ByReconcile is the actor reconcile writes into histories (its package
// names it By): its own move of a replaying entry to recovered is a repair,
// not a duplicate.
const ByReconcile = "reconcile"

// Duplicate reports whether a replay of the entry found its task completed
// before publishing it: the work was done although the message also died
// (a completion attempted twice). Reconcile's own repairs do not count.
func (e *Entry) Duplicate() bool {
	for _, t := range e.History {
		if t.From == string(Replaying) && t.To == string(Recovered) && t.By != ByReconcile {
			return true
		}
	}
	return false
}

// Slot is the key of t's five-minute slot within its hour.
func Slot(t time.Time) string {
	m := t.UTC().Minute()
	m -= m % int(SlotWidth/time.Minute)
	if m < 10 {
		return "0" + strconv.Itoa(m)
	}
	return strconv.Itoa(m)
}

// SlotStart is the start of slot within hour (a Hour id); ok is false for a
// key that is not a slot.
func SlotStart(hour time.Time, slot string) (time.Time, bool) {
	m, err := strconv.Atoi(slot)
	if err != nil || m < 0 || m >= 60 {
		return time.Time{}, false
	}
	return hour.Truncate(time.Hour).Add(time.Duration(m) * time.Minute), true
}

// categoryPoison is the category the poison counters follow.
const categoryPoison = "poison"

// tenantPart is e's part of its tenant-hour counters as e stands.
func tenantPart(e *Entry) TenantHour {
	slot := Slot(e.CreatedAt)
	t := TenantHour{
		Slots:         map[string]int64{slot: 1},
		Statuses:      map[string]int64{string(e.Status): 1},
		LastFailureMs: e.CreatedAt.UnixMilli(),
	}
	if e.Category == categoryPoison {
		t.PoisonSlots = map[string]int64{slot: 1}
		if e.Status == Quarantined {
			t.QuarantinedPoison = 1
		}
	}
	if e.Duplicate() {
		t.Duplicates = 1
	}
	return t
}

// Add adds o to t (LastFailureMs: the later one).
func (t *TenantHour) Add(o TenantHour) { t.add(o, 1) }

func (t *TenantHour) add(o TenantHour, sign int64) {
	addMap := func(dst *map[string]int64, src map[string]int64) {
		for k, v := range src {
			if *dst == nil {
				*dst = map[string]int64{}
			}
			(*dst)[k] += sign * v
		}
	}
	addMap(&t.Slots, o.Slots)
	addMap(&t.PoisonSlots, o.PoisonSlots)
	addMap(&t.Statuses, o.Statuses)
	t.QuarantinedPoison += sign * o.QuarantinedPoison
	t.Duplicates += sign * o.Duplicates
	t.LastFailureMs = max(t.LastFailureMs, o.LastFailureMs)
}

// Entries is the number of entries counted.
func (t TenantHour) Entries() int64 { return sum(t.Slots) }

// InStatus is the number of entries now in one of sts.
func (t TenantHour) InStatus(sts ...Status) int64 {
	var n int64
	for _, st := range sts {
		n += t.Statuses[string(st)]
	}
	return n
}

func sum[N int | int64](m map[string]N) N {
	var n N
	for _, v := range m {
		n += v
	}
	return n
}

// Normalized drops zero counters (a -1 and a +1 leave a 0 field behind),
// so equal counts compare equal however they were reached.
func (t TenantHour) Normalized() TenantHour {
	clean := func(m map[string]int64) map[string]int64 {
		out := maps.Clone(m)
		maps.DeleteFunc(out, func(_ string, v int64) bool { return v == 0 })
		if len(out) == 0 {
			return nil
		}
		return out
	}
	t.Slots, t.PoisonSlots, t.Statuses = clean(t.Slots), clean(t.PoisonSlots), clean(t.Statuses)
	return t
}

// isZero reports whether t changes nothing as a delta (a move that keeps
// status and category).
func (t TenantHour) isZero() bool {
	n := t.Normalized()
	return len(n.Slots) == 0 && len(n.PoisonSlots) == 0 && len(n.Statuses) == 0 && n.QuarantinedPoison == 0 && n.Duplicates == 0 && n.LastFailureMs == 0
}

// tenantDelta is what moving an entry from before to after changes in its
// tenant-hour counters (before nil: a new entry). Creation time and tenant
// never change, so the last failure is written only with a new entry.
func tenantDelta(before, after *Entry) map[string]TenantHour {
	if before != nil && before.Tenant != after.Tenant {
		// Another tenant's now: out of the old one's counters (its last
		// failure, a maximum, stays), into the new one's.
		var gone TenantHour
		gone.add(tenantPart(before), -1)
		gone.LastFailureMs = 0
		return map[string]TenantHour{metricKey(before.Tenant): gone.Normalized(), metricKey(after.Tenant): tenantPart(after).Normalized()}
	}
	d := tenantPart(after)
	if before != nil {
		d.add(tenantPart(before), -1)
		d.LastFailureMs = 0
	}
	if d.isZero() {
		return nil
	}
	return map[string]TenantHour{metricKey(after.Tenant): d.Normalized()}
}

// updates is the merge data of a tenant-hour delta: increments, and the
// maximum of the last failure.
func (t TenantHour) updates() map[string]any {
	u := map[string]any{}
	for field, m := range map[string]map[string]int64{"slots": t.Slots, "poison_slots": t.PoisonSlots, "statuses": t.Statuses} {
		if len(m) == 0 {
			continue
		}
		sub := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			sub[k] = firestore.Increment(m[k])
		}
		u[field] = sub
	}
	if t.QuarantinedPoison != 0 {
		u["quarantined_poison"] = firestore.Increment(t.QuarantinedPoison)
	}
	if t.Duplicates != 0 {
		u["duplicates"] = firestore.Increment(t.Duplicates)
	}
	if t.LastFailureMs != 0 {
		u["last_failure_ms"] = firestore.FieldTransformMaximum(t.LastFailureMs)
	}
	return u
}

// AddTenantPart adds e's tenant-hour part as e stands now to the sum m, as
// the metrics documents store it (a recount: Record and every move keep the
// stored counters equal to this sum over the hour's entries).
func AddTenantPart(m *Metrics, e *Entry) {
	sumTenants(&m.Tenants, map[string]TenantHour{metricKey(e.Tenant): tenantPart(e)})
}

func sumTenants(dst *map[string]TenantHour, src map[string]TenantHour) {
	for k, v := range src {
		if *dst == nil {
			*dst = map[string]TenantHour{}
		}
		cur := (*dst)[k]
		cur.Add(v)
		(*dst)[k] = cur
	}
}

// NoKey is the counter key the metrics documents store for an empty
// tenant, agent or other breakdown value (a field name cannot be empty):
// a name the naming rule gives no tenant or agent (event.NoName).
const NoKey = event.NoName

// metricKey is a counter key as the metrics documents store it.
func metricKey(k string) string {
	if k == "" {
		return NoKey
	}
	return k
}
