package console

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/jsdlq/jsdlq/shared/audit"
	"github.com/jsdlq/jsdlq/shared/operator"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is the overview page: a week of the day rollups (charts, rates,
// what waits for a human), the oldest waiting entries, the breakers not
// closed and the last audit. It reads a bounded number of documents
// whatever the failure log holds (docs/console.md).

// What the overview lists: the oldest entries waiting for a human, and
// the breakers not closed (a count says how many there are in all when
// more are).
const (
	overviewWaiting  = 20
	overviewBreakers = 10
)

// overviewData is the overview page.
type overviewData struct {
	Day, Week chart
	Rates     []rates
	// WaitingBy counts, per waiting status, the entries of each window
	// now in it (from the rollups).
	WaitingBy []waitingCount
	// Waiting are the oldest entries waiting for a human, of any age.
	Waiting  []*store.Entry
	Breakers []*store.Breaker
	// NotClosed counts the breakers not closed when there are more than
	// Breakers lists (0 when it lists them all).
	NotClosed int64
	Audit     *audit.Report
	Alerts    []*audit.Finding
	// Resolution are the week's resolution figures, from the rollups'
	// counters (store.Outcomes): no read of their own.
	Resolution store.Resolution
}

// waitingCount is a waiting status and how many of the last 24 hours' and
// 7 days' entries are in it now.
type waitingCount struct {
	Status    store.Status
	Day, Week int64
}

func (s *Server) overview(r *http.Request) (string, string, any, error) {
	ctx := r.Context()
	now := s.now().UTC()
	var d overviewData
	// The week ends with the current hour; the day is its last 24 hours.
	const week, day = 7 * 24, 24
	first := now.Truncate(time.Hour).Add(-(week - 1) * time.Hour)
	var (
		rows    []store.Rollup
		waiting store.Page
	)
	// The reads are independent: they run at once, so the page takes
	// what its slowest read takes, not their sum.
	err := concurrently(
		func() (err error) { rows, err = s.store.HourlyRollups(ctx, first, week); return err },
		func() (err error) {
			// Waiting for a human, whatever the age: one query over the
			// approvable statuses, oldest first.
			waiting, err = s.store.Entries(ctx, store.Query{Statuses: operator.Approvable, Order: store.OldestFirst, View: store.ListView, Limit: overviewWaiting})
			return err
		},
		func() (err error) {
			notClosed := store.BreakerStatesNotClosed()
			if d.Breakers, err = s.store.ListBreakers(ctx, notClosed, overviewBreakers+1); err != nil || len(d.Breakers) <= overviewBreakers {
				return err
			}
			d.Breakers = d.Breakers[:overviewBreakers]
			d.NotClosed, err = s.store.CountBreakers(ctx, notClosed)
			return err
		},
		func() (err error) { d.Audit, err = s.store.LatestAudit(ctx); return err },
	)
	if err != nil {
		return "", "", nil, err
	}
	d.Day, d.Week = newChart(rows[week-day:], 720, 6), newChart(rows, 840, 24)
	d.Rates = []rates{newRates("24 h", rows[week-day:]), newRates("7 d", rows)}
	for _, st := range operator.Approvable {
		c := waitingCount{Status: st}
		for i, row := range rows {
			n := row.InStatus(st)
			c.Week += n
			if i >= week-day {
				c.Day += n
			}
		}
		d.WaitingBy = append(d.WaitingBy, c)
	}
	var outcomes store.Outcomes
	for _, row := range rows {
		outcomes.Add(row.Outcomes)
	}
	d.Resolution = outcomes.Figures()
	d.Waiting = waiting.Entries
	if d.Audit != nil {
		for _, f := range d.Audit.Findings {
			if f.Alert {
				d.Alerts = append(d.Alerts, f)
			}
		}
	}
	return "overview", "Overview", d, nil
}

// concurrently runs reads at once and returns their errors joined.
func concurrently(reads ...func() error) error {
	errs := make([]error, len(reads))
	var wg sync.WaitGroup
	for i, read := range reads {
		wg.Go(func() { errs[i] = read() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
