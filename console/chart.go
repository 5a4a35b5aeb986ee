package console

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file draws the overview's charts: stacked bars of dead tasks per
// hour by category, as inline SVG the template writes (no script), with a
// y axis, gridlines and axis titles.

// chart is a stacked bar chart of dead tasks per hour by category.
type chart struct {
	Width, Height int
	// Left is the y axis' margin; the bars start there. Top is the
	// margin above the bars' area (the y axis' title), Plot its height;
	// the hour labels go below it.
	Left, Top, Plot int
	Bars            []bar
	Ticks           []tick
	YTicks          []tick
	Legend          []legendItem
	Max             int64
	Total           int64
}

type bar struct {
	X, Width int
	Label    string
	Segments []segment
}

type segment struct {
	Y, Height int
	Class     string
	Title     string
}

// tick labels an axis: X is an hour's place on the x axis, or for the y
// axis the height of a gridline.
type tick struct {
	X     int
	Label string
}

type legendItem struct {
	Class, Name string
	Total       int64
}

// categoryClass is a category's colour class: fixed by its place in the
// triage vocabulary, so a category keeps its colour whichever others
// appear; a category outside it (an old entry's) shares the last.
func categoryClass(cat string) string {
	if i := slices.Index(triage.Categories, triage.Category(cat)); i >= 0 {
		return "c" + strconv.Itoa(i)
	}
	return "c" + strconv.Itoa(len(triage.Categories))
}

// niceMax is the top of the y axis: max rounded up to 1, 2 or 5 times a
// power of ten, so its gridlines fall on round numbers.
func niceMax(max int64) int64 {
	if max <= 0 {
		return 1
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= max {
				return m * p
			}
		}
	}
}

// newChart draws hours (oldest first) as bars width pixels wide in all; a
// label every tickEvery hours (at hours of the day divisible by it).
func newChart(hours []store.Rollup, width, tickEvery int) chart {
	const plot, axis, left, top = 160, 34, 40, 18
	c := chart{Width: width + left, Height: top + plot + axis, Left: left, Top: top, Plot: plot}
	totals := map[string]int64{}
	for _, m := range hours {
		c.Max = max(c.Max, m.Total)
		c.Total += m.Total
		for cat, n := range m.ByCategory {
			totals[cat] += n
		}
	}
	cats := make([]string, 0, len(totals))
	for cat := range totals {
		cats = append(cats, cat)
	}
	sort.Strings(cats)
	for _, cat := range cats {
		c.Legend = append(c.Legend, legendItem{Class: categoryClass(cat), Name: cat, Total: totals[cat]})
	}
	yMax := niceMax(c.Max)
	for _, f := range []int64{0, 1, 2} {
		v := yMax * f / 2
		if f == 1 && yMax%2 != 0 {
			continue // no half of 1
		}
		c.YTicks = append(c.YTicks, tick{X: plot - int(v*int64(plot)/yMax), Label: strconv.FormatInt(v, 10)})
	}
	if len(hours) == 0 {
		return c
	}
	bw := width / len(hours)
	gap := 1
	if bw > 8 {
		gap = 2
	}
	for i, m := range hours {
		b := bar{X: left + i*bw, Width: max(1, bw-gap), Label: m.Hour}
		if t, err := time.Parse(store.HourLayout, m.Hour); err == nil && tickEvery > 0 && t.Hour()%tickEvery == 0 {
			label := t.Format("15:00")
			if t.Hour() == 0 {
				label = t.Format("Jan 2")
			}
			c.Ticks = append(c.Ticks, tick{X: left + i*bw, Label: label})
		}
		y := plot
		for _, cat := range cats {
			n := m.ByCategory[cat]
			if n == 0 {
				continue
			}
			h := max(1, int(n*int64(plot)/yMax))
			y -= h
			b.Segments = append(b.Segments, segment{Y: y, Height: h, Class: categoryClass(cat), Title: fmt.Sprintf("%s %s: %d", m.Hour, cat, n)})
		}
		c.Bars = append(c.Bars, b)
	}
	return c
}
