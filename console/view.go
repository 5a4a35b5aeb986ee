package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jsdlq/jsdlq/shared/store"
)

// This file turns store values into what the pages show: the payload as
// text (pretty-printed when it is JSON; never trusted, html/template
// escapes every byte), a line diff of an edit, the overview's bar chart.

// payloadChunk is the most payload text a page carries: a larger payload
// is shown a chunk at a time (size and sha256 always cover the whole). A
// binary payload's chunk is a quarter of it in bytes, since its hex dump is
// about four times as long.
const payloadChunk = 256 << 10

// payloadView is a payload as the entry page shows it: one chunk of it.
type payloadView struct {
	Size   int
	SHA256 string
	Text   string // this chunk: pretty JSON, the text, or a hex dump
	Kind   string // "json", "text" or "binary"
	// Chunk is the chunk shown (1-based) of Chunks; From and To are its
	// offsets, of the pretty-printed text (json), the text, or the payload
	// bytes (binary).
	Chunk, Chunks int
	From, To      int
	Editable      bool // one chunk of valid UTF-8 text that an approve form can carry
}

// errBadChunk is a chunk number the payload does not have.
var errBadChunk = errors.New("no such chunk")

// viewPayload shows chunk (1-based) of p.
func viewPayload(p []byte, chunk int) (payloadView, error) {
	v := payloadView{Size: len(p), SHA256: store.PayloadSum(p), Chunk: chunk}
	var text string
	switch {
	case json.Valid(p):
		var b bytes.Buffer
		_ = json.Indent(&b, p, "", "  ")
		text, v.Kind = b.String(), "json"
	case utf8.Valid(p):
		text, v.Kind = string(p), "text"
	default:
		v.Kind = "binary"
		size := payloadChunk / 4
		v.Chunks = max(1, (len(p)+size-1)/size)
		if chunk < 1 || chunk > v.Chunks {
			return v, fmt.Errorf("%w %d: the payload has %d", errBadChunk, chunk, v.Chunks)
		}
		v.From, v.To = (chunk-1)*size, min(chunk*size, len(p))
		v.Text = hexDump(p[v.From:v.To], v.From)
		return v, nil
	}
	bounds := textChunks(text)
	v.Chunks = len(bounds) - 1
	if chunk < 1 || chunk > v.Chunks {
		return v, fmt.Errorf("%w %d: the payload has %d", errBadChunk, chunk, v.Chunks)
	}
	v.From, v.To = bounds[chunk-1], bounds[chunk]
	v.Text, v.Editable = text[v.From:v.To], v.Chunks == 1
	return v, nil
}

// textChunks cuts text into pieces of at most payloadChunk bytes, after a
// newline where one is in the second half of a piece (JSON's lines stay
// whole) and never inside a UTF-8 sequence; it returns the offsets, 0 and
// len(text) included.
func textChunks(text string) []int {
	out := []int{0}
	for off := 0; off < len(text); {
		end := off + payloadChunk
		if end >= len(text) {
			end = len(text)
		} else if nl := strings.LastIndexByte(text[off+payloadChunk/2:end], '\n'); nl >= 0 {
			end = off + payloadChunk/2 + nl + 1
		} else {
			for end > off && !utf8.RuneStart(text[end]) {
				end--
			}
		}
		out = append(out, end)
		off = end
	}
	if len(out) == 1 {
		out = append(out, 0) // an empty payload is one empty chunk
	}
	return out
}

// hexDump is hex.Dump with offsets counted from base, so a chunk's lines
// name their place in the whole payload.
func hexDump(p []byte, base int) string {
	var b strings.Builder
	for off := 0; off < len(p); off += 16 {
		line := p[off:min(off+16, len(p))]
		fmt.Fprintf(&b, "%08x  ", base+off)
		for i := range 16 {
			if i < len(line) {
				fmt.Fprintf(&b, "%02x ", line[i])
			} else {
				b.WriteString("   ")
			}
			if i == 7 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(" |")
		for _, c := range line {
			if c < 0x20 || c > 0x7e {
				c = '.'
			}
			b.WriteByte(c)
		}
		b.WriteString("|\n")
	}
	return b.String()
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

// foldDiff keeps context unchanged lines around each change and folds
// longer unchanged runs into one line (Op "…", Text says how many).
func foldDiff(d []diffLine, context int) []diffLine {
	var out []diffLine
	for i := 0; i < len(d); {
		if d[i].Op != " " {
			out = append(out, d[i])
			i++
			continue
		}
		j := i
		for j < len(d) && d[j].Op == " " {
			j++
		}
		keepHead, keepTail := context, context
		if i == 0 {
			keepHead = 0
		}
		if j == len(d) {
			keepTail = 0
		}
		if j-i <= keepHead+keepTail+1 {
			out = append(out, d[i:j]...)
		} else {
			out = append(out, d[i:i+keepHead]...)
			out = append(out, diffLine{"…", fmt.Sprintf("%d unchanged lines", j-i-keepHead-keepTail)})
			out = append(out, d[j-keepTail:j]...)
		}
		i = j
	}
	return out
}

// rates are the overview's DLQ and recovery rates over a window of hours.
type rates struct {
	Window string
	Hours  int
	// Sampled counts the hours with a work-stream sample; Dead and
	// Published are summed over those hours only, so the DLQ rate
	// compares like with like.
	store.DeadRate
	DLQRate  float64 // Dead / Published, -1 when nothing is known
	Recovery store.Recovery
}

// newRates sums the window's rows (oldest first): the dead and published of
// the sampled hours, and the settled and recovered of the entries created
// in the window as they stand now.
func newRates(window string, rows []store.Rollup) rates {
	r := rates{Window: window, Hours: len(rows)}
	for _, row := range rows {
		r.Add(row.Total, row.Published)
		rec := row.Recovery()
		r.Recovery.Recovered += rec.Recovered
		r.Recovery.Settled += rec.Settled
	}
	r.DLQRate = r.Rate()
	return r
}

// pct formats a rate; a negative one is unknown.
func pct(r float64) string {
	if r < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f %%", 100*r)
}

// humanDuration is d as an operator reads it: 394ms, 1.2s, 4m 10s,
// 2h 5m, 3d 4h (two units at most; the rest is noise on a page).
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + humanDuration(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return twoUnits(int(d/time.Minute), "m", int(d%time.Minute/time.Second), "s")
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return twoUnits(int(d/time.Hour), "h", int(d%time.Hour/time.Minute), "m")
	}
	d = d.Round(time.Hour)
	return twoUnits(int(d/(24*time.Hour)), "d", int(d%(24*time.Hour)/time.Hour), "h")
}

func twoUnits(a int, au string, b int, bu string) string {
	if b == 0 {
		return strconv.Itoa(a) + au
	}
	return strconv.Itoa(a) + au + " " + strconv.Itoa(b) + bu
}

// plural is n and the noun, in the plural unless n is 1 ("1 finding",
// "3 findings"); the plural is the noun with an s unless given.
func plural(n any, noun string, pluralForm ...string) string {
	var i int64
	switch v := n.(type) {
	case int:
		i = int64(v)
	case int64:
		i = v
	}
	if i != 1 {
		noun += "s"
		if len(pluralForm) > 0 {
			noun = pluralForm[0]
		}
	}
	return strconv.FormatInt(i, 10) + " " + noun
}

// humanRate is a rate in actions per second as the forms take it: per
// second from one a second up, per minute below, per hour below that.
func humanRate(perSecond float64) string {
	num := func(f float64) string { return strconv.FormatFloat(f, 'g', 3, 64) }
	switch {
	case perSecond >= 1:
		return num(perSecond) + "/s"
	case perSecond*60 >= 1:
		return num(perSecond*60) + "/m"
	}
	return num(perSecond*3600) + "/h"
}
