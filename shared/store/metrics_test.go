package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
)

func TestRewriteHourReplacesEveryShard(t *testing.T) {
	ctx, _, s := newStore(t)
	at := time.Now().UTC().Add(-3 * time.Hour)
	hour := store.Hour(at)
	for i := range 5 {
		if err := s.AddMetrics(ctx, at, fmt.Sprint("k", i), store.Metrics{Total: 1, ByTenant: map[string]int64{"a": 1}, ReplaysPublished: 1}); err != nil {
			t.Fatal(err)
		}
	}
	want := store.Metrics{Total: 3, ByTenant: map[string]int64{"a": 2, "b": 1}}
	ok, err := s.RewriteHour(ctx, hour, func(cur store.Metrics) (store.Metrics, bool) {
		if cur.Total != 5 {
			t.Errorf("fix saw total %d, want the sum of all shards, 5", cur.Total)
		}
		w := want
		w.ReplaysPublished = cur.ReplaysPublished
		return w, true
	})
	if err != nil || !ok {
		t.Fatalf("RewriteHour = %v, %v", ok, err)
	}
	got, err := s.ReadMetrics(ctx, hour)
	if err != nil || got.Total != 3 || got.ByTenant["a"] != 2 || got.ByTenant["b"] != 1 || got.ReplaysPublished != 5 {
		t.Errorf("after rewrite ReadMetrics = %+v, %v; want total 3, a 2, b 1, published kept at 5", got, err)
	}
	ok, err = s.RewriteHour(ctx, hour, func(store.Metrics) (store.Metrics, bool) { return store.Metrics{}, false })
	if err != nil || ok {
		t.Errorf("RewriteHour declined = %v, %v; want nothing written", ok, err)
	}
}
