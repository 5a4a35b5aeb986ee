package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/store"
)

// This file turns store values into what the pages show: the payload as
// text (pretty-printed when it is JSON; never trusted, html/template
// escapes every byte), a line diff of an edit, the overview's bar chart.

// maxShownPayload bounds the payload text a page carries; the rest is
// summarised (size and sha256 cover the whole payload).
const maxShownPayload = 256 << 10

// payloadView is a payload as the entry page shows it.
type payloadView struct {
	Size      int
	SHA256    string
	Text      string // pretty JSON, or the text, or a hex dump
	Kind      string // "json", "text" or "binary"
	Truncated bool
	Editable  bool // valid UTF-8 text that an approve form can carry
}

func viewPayload(p []byte) payloadView {
	sum := sha256.Sum256(p)
	v := payloadView{Size: len(p), SHA256: hex.EncodeToString(sum[:])}
	switch {
	case json.Valid(p):
		var b bytes.Buffer
		_ = json.Indent(&b, p, "", "  ")
		v.Text, v.Kind, v.Editable = b.String(), "json", true
	case utf8.Valid(p):
		v.Text, v.Kind, v.Editable = string(p), "text", true
	default:
		v.Text, v.Kind = hex.Dump(p[:min(len(p), maxShownPayload/4)]), "binary"
		v.Truncated = len(p) > maxShownPayload/4
		return v
	}
	if len(v.Text) > maxShownPayload {
		v.Text, v.Truncated, v.Editable = v.Text[:maxShownPayload], true, false
	}
	return v
}

// diffLine is one line of a diff: Op is ' ', '-' or '+'.
type diffLine struct {
	Op   string
	Text string
}

// lineDiff is a longest-common-subsequence line diff; inputs over
// maxDiffLines lines are shown as whole removal and addition.
func lineDiff(a, b string) []diffLine {
	const maxDiffLines = 2000
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []diffLine
	if len(al) > maxDiffLines || len(bl) > maxDiffLines {
		for _, l := range al {
			out = append(out, diffLine{"-", l})
		}
		for _, l := range bl {
			out = append(out, diffLine{"+", l})
		}
		return out
	}
	// lcs[i][j] is the LCS length of al[i:] and bl[j:].
	lcs := make([][]int, len(al)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(bl)+1)
	}
	for i := len(al) - 1; i >= 0; i-- {
		for j := len(bl) - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(al) && j < len(bl) {
		switch {
		case al[i] == bl[j]:
			out = append(out, diffLine{" ", al[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{"-", al[i]})
			i++
		default:
			out = append(out, diffLine{"+", bl[j]})
			j++
		}
	}
	for ; i < len(al); i++ {
		out = append(out, diffLine{"-", al[i]})
	}
	for ; j < len(bl); j++ {
		out = append(out, diffLine{"+", bl[j]})
	}
	return out
}

// chart is the overview's stacked bar chart of dead tasks per hour by
// category, drawn as inline SVG by the template.
type chart struct {
	Width, Height int
	Bars          []bar
	Legend        []legendItem
	Max           int64
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

type legendItem struct {
	Class, Name string
	Total       int64
}

// newChart draws hours (oldest first) as bars.
func newChart(hours []store.Metrics) chart {
	const width, height, gap = 720, 160, 2
	c := chart{Width: width, Height: height}
	totals := map[string]int64{}
	for _, m := range hours {
		c.Max = max(c.Max, m.Total)
		for cat, n := range m.ByCategory {
			totals[cat] += n
		}
	}
	cats := make([]string, 0, len(totals))
	for cat := range totals {
		cats = append(cats, cat)
	}
	sort.Strings(cats)
	class := map[string]string{}
	for i, cat := range cats {
		class[cat] = fmt.Sprintf("c%d", i%8)
		c.Legend = append(c.Legend, legendItem{Class: class[cat], Name: cat, Total: totals[cat]})
	}
	if len(hours) == 0 {
		return c
	}
	bw := width / len(hours)
	for i, m := range hours {
		b := bar{X: i * bw, Width: bw - gap, Label: m.Hour}
		y := height
		for _, cat := range cats {
			n := m.ByCategory[cat]
			if n == 0 || c.Max == 0 {
				continue
			}
			h := max(1, int(n*int64(height)/c.Max))
			y -= h
			b.Segments = append(b.Segments, segment{Y: y, Height: h, Class: class[cat], Title: fmt.Sprintf("%s %s: %d", m.Hour, cat, n)})
		}
		c.Bars = append(c.Bars, b)
	}
	return c
}
