package deploycheck

import (
	"context"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc"
)

// A query shape is what decides which index a Firestore query needs: its
// collection, the fields it tests for equality (==, in, array-contains),
// and its order (explicit, or implied by a range filter), without the
// trailing document-id order every index ends with anyway.
type shape struct {
	Collection string
	Group      bool // a collection-group query
	Equal      []string
	Range      []string
	Orders     []orderField
}

type orderField struct {
	Path string
	Desc bool
}

func (o orderField) String() string {
	if o.Desc {
		return o.Path + " DESC"
	}
	return o.Path + " ASC"
}

func (s shape) String() string {
	var parts []string
	for _, f := range s.Equal {
		parts = append(parts, f+" ==")
	}
	for _, f := range s.Range {
		parts = append(parts, f+" range")
	}
	if len(s.Orders) > 0 {
		var os []string
		for _, o := range s.Orders {
			os = append(os, o.String())
		}
		parts = append(parts, "order "+strings.Join(os, ", "))
	}
	coll := s.Collection
	if s.Group {
		coll += " (group)"
	}
	if len(parts) == 0 {
		return coll + ": all documents"
	}
	return coll + ": " + strings.Join(parts, " · ")
}

const docID = "__name__"

// shapeOf reads the shape of a query as the client sent it.
func shapeOf(q *firestorepb.StructuredQuery) shape {
	var s shape
	if from := q.GetFrom(); len(from) > 0 {
		s.Collection, s.Group = from[0].GetCollectionId(), from[0].GetAllDescendants()
	}
	eq, rng := map[string]bool{}, map[string]bool{}
	var walk func(f *firestorepb.StructuredQuery_Filter)
	walk = func(f *firestorepb.StructuredQuery_Filter) {
		switch {
		case f == nil:
		case f.GetCompositeFilter() != nil:
			for _, sub := range f.GetCompositeFilter().GetFilters() {
				walk(sub)
			}
		case f.GetFieldFilter() != nil:
			ff := f.GetFieldFilter()
			switch ff.GetOp() {
			case firestorepb.StructuredQuery_FieldFilter_EQUAL, firestorepb.StructuredQuery_FieldFilter_IN,
				firestorepb.StructuredQuery_FieldFilter_ARRAY_CONTAINS, firestorepb.StructuredQuery_FieldFilter_ARRAY_CONTAINS_ANY:
				eq[ff.GetField().GetFieldPath()] = true
			default:
				rng[ff.GetField().GetFieldPath()] = true
			}
		case f.GetUnaryFilter() != nil:
			uf := f.GetUnaryFilter()
			switch uf.GetOp() {
			case firestorepb.StructuredQuery_UnaryFilter_IS_NULL, firestorepb.StructuredQuery_UnaryFilter_IS_NAN:
				eq[uf.GetField().GetFieldPath()] = true
			default:
				rng[uf.GetField().GetFieldPath()] = true
			}
		}
	}
	walk(q.GetWhere())
	for f := range eq {
		s.Equal = append(s.Equal, f)
	}
	for f := range rng {
		s.Range = append(s.Range, f)
	}
	sort.Strings(s.Equal)
	sort.Strings(s.Range)
	for _, o := range q.GetOrderBy() {
		s.Orders = append(s.Orders, orderField{o.GetField().GetFieldPath(), o.GetDirection() == firestorepb.StructuredQuery_DESCENDING})
	}
	// Firestore orders by every range field not ordered explicitly,
	// ascending, after the explicit orders.
	for _, f := range s.Range {
		if !slices.ContainsFunc(s.Orders, func(o orderField) bool { return o.Path == f }) {
			s.Orders = append(s.Orders, orderField{Path: f})
		}
	}
	// Every index ends with the document id in the direction of its last
	// field, so a trailing id order in that direction costs nothing.
	if n := len(s.Orders); n > 0 && s.Orders[n-1].Path == docID {
		last := false
		if n > 1 {
			last = s.Orders[n-2].Desc
		}
		if s.Orders[n-1].Desc == last {
			s.Orders = s.Orders[:n-1]
		}
	}
	return s
}

// recorder records the shape of every query a Firestore client sends
// (RunQuery and RunAggregationQuery, in transactions too), with the
// functions of this module that were on the stack when it was sent.
type recorder struct {
	mu     sync.Mutex
	shapes map[string]*recorded
	funcs  map[string]bool // every module function seen issuing a query
}

type recorded struct {
	shape   shape
	callers map[string]bool
}

func newRecorder() *recorder {
	return &recorder{shapes: map[string]*recorded{}, funcs: map[string]bool{}}
}

func (r *recorder) interceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !(strings.HasSuffix(method, "/RunQuery") || strings.HasSuffix(method, "/RunAggregationQuery")) {
			return cs, err
		}
		return &recordingStream{ClientStream: cs, r: r}, nil
	}
}

type recordingStream struct {
	grpc.ClientStream
	r *recorder
}

func (s *recordingStream) SendMsg(m any) error {
	var q *firestorepb.StructuredQuery
	switch req := m.(type) {
	case *firestorepb.RunQueryRequest:
		q = req.GetStructuredQuery()
	case *firestorepb.RunAggregationQueryRequest:
		q = req.GetStructuredAggregationQuery().GetStructuredQuery()
	}
	if q != nil {
		s.r.add(shapeOf(q), moduleCallers())
	}
	return s.ClientStream.SendMsg(m)
}

func (r *recorder) add(s shape, callers []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := s.String()
	rec := r.shapes[k]
	if rec == nil {
		rec = &recorded{shape: s, callers: map[string]bool{}}
		r.shapes[k] = rec
	}
	for _, c := range callers {
		r.funcs[c] = true
	}
	// Named by the innermost exported function: store.(*Store).Count
	// rather than its helper count.
	for i, c := range callers {
		if name := c[strings.LastIndex(c, ".")+1:]; i == len(callers)-1 || (name != "" && name[0] >= 'A' && name[0] <= 'Z') {
			rec.callers[c] = true
			break
		}
	}
}

func (r *recorder) all() []*recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*recorded, 0, len(r.shapes))
	for _, rec := range r.shapes {
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].shape.String() < out[j].shape.String() })
	return out
}

func (r *recorder) issued(fn string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.funcs[fn]
}

const module = "github.com/jsdlq/jsdlq/"

var closureSuffix = regexp.MustCompile(`(\.func\d+|\.gowrap\d+|-range\d+|\.\d+)+$`)

// moduleCallers lists the functions of this module (outside this test) on
// the calling goroutine's stack, innermost first, closures named by the
// function that holds them.
func moduleCallers() []string {
	pcs := make([]uintptr, 128)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var out []string
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, module) && !strings.HasPrefix(f.Function, module+"internal/deploycheck") {
			name := closureSuffix.ReplaceAllString(f.Function, "")
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		if !more {
			return out
		}
	}
}

// shortFunc drops the module path: store.(*Store).Entries.
func shortFunc(fn string) string {
	fn = strings.TrimPrefix(fn, module)
	if i := strings.LastIndex(fn[:max(0, strings.Index(fn, "."))], "/"); i >= 0 {
		fn = fn[i+1:]
	}
	return fn
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func shortFuncs(fns []string) string {
	out := make([]string, len(fns))
	for i, f := range fns {
		out[i] = shortFunc(f)
	}
	return strings.Join(out, ", ")
}
