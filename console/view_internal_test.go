package console

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{394122152 * time.Nanosecond, "394ms"},
		{1234 * time.Millisecond, "1.2s"},
		{59 * time.Second, "59.0s"},
		{4*time.Minute + 10*time.Second, "4m 10s"},
		{5 * time.Minute, "5m"},
		{2*time.Hour + 5*time.Minute + 20*time.Second, "2h 5m"},
		{3*24*time.Hour + 4*time.Hour, "3d 4h"},
		{-1500 * time.Millisecond, "-1.5s"},
		{0, "0s"},
	}
	for _, tt := range tests {
		if got := humanDuration(tt.in); got != tt.want {
			t.Errorf("humanDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPlural(t *testing.T) {
	tests := []struct {
		n     any
		noun  string
		forms []string
		want  string
	}{
		{1, "finding", nil, "1 finding"},
		{0, "finding", nil, "0 findings"},
		{int64(3), "finding", nil, "3 findings"},
		{1, "entry", []string{"entries"}, "1 entry"},
		{2, "entry", []string{"entries"}, "2 entries"},
	}
	for _, tt := range tests {
		if got := plural(tt.n, tt.noun, tt.forms...); got != tt.want {
			t.Errorf("plural(%v, %q) = %q, want %q", tt.n, tt.noun, got, tt.want)
		}
	}
}

func TestHumanRate(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{5, "5/s"},
		{1.0 / 60, "1/m"},
		{0.5, "30/m"},
		{1.0 / 3600, "1/h"},
	}
	for _, tt := range tests {
		if got := humanRate(tt.in); got != tt.want {
			t.Errorf("humanRate(%g) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A category keeps its colour whichever other categories the window has:
// the colour is the category's, not its rank among those shown.
func TestChartColourIsTheCategorys(t *testing.T) {
	alone := newChart([]store.Rollup{{Hour: "2026-01-02T03", Total: 1, ByCategory: map[string]int64{"poison": 1}}}, 240, 6)
	with := newChart([]store.Rollup{{Hour: "2026-01-02T03", Total: 3, ByCategory: map[string]int64{"poison": 1, "governance": 1, "permanent": 1}}}, 240, 6)
	class := func(c chart, name string) string {
		for _, l := range c.Legend {
			if l.Name == name {
				return l.Class
			}
		}
		return ""
	}
	if a, w := class(alone, "poison"), class(with, "poison"); a == "" || a != w {
		t.Errorf("poison's colour alone = %q, beside others = %q, want one class", a, w)
	}
	seen := map[string]string{}
	for _, cat := range triage.Categories {
		c := categoryClass(string(cat))
		if other, dup := seen[c]; dup {
			t.Errorf("categoryClass(%s) = %s, also %s's", cat, c, other)
		}
		seen[c] = string(cat)
	}
}

// The y axis ends on a round number at or above the tallest bar, its
// labels at 0, the middle and the top.
func TestChartYAxis(t *testing.T) {
	tests := []struct {
		max  int64
		want []string
	}{
		{0, []string{"0", "1"}},
		{7, []string{"0", "5", "10"}},
		{13, []string{"0", "10", "20"}},
		{180, []string{"0", "100", "200"}},
	}
	for _, tt := range tests {
		c := newChart([]store.Rollup{{Hour: "2026-01-02T03", Total: tt.max, ByCategory: map[string]int64{"transient": tt.max}}}, 240, 6)
		var got []string
		for _, y := range c.YTicks {
			got = append(got, y.Label)
		}
		if len(got) != len(tt.want) {
			t.Errorf("newChart(max %d) y labels = %q, want %q", tt.max, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("newChart(max %d) y labels = %q, want %q", tt.max, got, tt.want)
				break
			}
		}
	}
}
