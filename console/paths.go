package console

import (
	"errors"
	"html/template"
	"net/url"
	"strings"

	"github.com/jsdlq/jsdlq/shared/event"
	"github.com/jsdlq/jsdlq/shared/store"
)

// This file is how the console writes and reads the identifiers in its
// URLs (docs/console.md, "Names in URLs"): pages and redirects build every
// path with event.URLPath and every query with url.Values, never by
// pasting a name into a string, and handlers read path values and filters
// through the identifiers' constructors, so a tenant named like a path
// ("../entries/x/discard?") is one segment that names that tenant and
// nothing else.

// linkFuncs are the templates' only ways to write a URL, and the way they
// show a value from the wire that may hold invisible characters:
//
//	{{path "entries" .ID "approve"}}         /entries/<id, escaped>/approve
//	{{query "/entries" "tenant" .Tenant}}     /entries?tenant=<escaped>
//	{{visible .Value}}                        a header or a name as sent, its
//	                                          control and bidirectional
//	                                          characters escaped visibly
//
// query leaves out empty values; its path is a literal of the template.
var linkFuncs = template.FuncMap{
	"path":    event.URLPath,
	"visible": event.Terminal,
	"query": func(path string, kv ...string) (template.URL, error) {
		if len(kv)%2 != 0 {
			return "", errors.New("query: an odd number of arguments")
		}
		q := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] != "" {
				q.Add(kv[i], kv[i+1])
			}
		}
		if len(q) == 0 {
			return template.URL(path), nil
		}
		// Built from url.Values: a literal path and an encoded query.
		return template.URL(path + "?" + q.Encode()), nil
	},
}

// maxParamBytes bounds a query parameter or filter value of a page.
const maxParamBytes = 512

// filterValue is filter name's one value, trimmed, read through the
// constructor of what it names: a tenant (the reserved one included), an
// agent, a task type; any other value is plain visible text
// (event.CheckValue). Anything else (several values, not UTF-8, a control
// character, over maxParamBytes) is a 400 before any I/O.
func filterValue(name string, v []string) (string, error) {
	if len(v) != 1 {
		return "", uiBad("filter %q: one value", name)
	}
	s := v[0]
	if err := event.CheckValue("filter "+name, s, maxParamBytes); err != nil {
		return "", uiBad("%s", event.Problem(err))
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	var err error
	switch name {
	case "tenant":
		_, err = event.ParseStoredTenant(s)
	case "agent":
		_, err = event.ParseAgent(s)
	case "task_type":
		_, err = event.ParseTaskType(s)
	}
	if err != nil {
		return "", uiBad("filter %s", event.Problem(err))
	}
	return s, nil
}

// pathTenant is the tenant a console path names ({tenant}): one an entry
// can be stored under, else a 400.
func pathTenant(v string) (string, error) {
	if _, err := event.ParseStoredTenant(v); err != nil {
		return "", uiBad("%s", event.Problem(err))
	}
	return v, nil
}

// pathEntry is the entry id a console path or form names: the document id
// of an event id (store.EventID), else a 400.
func pathEntry(v string) (string, error) {
	if _, err := store.EventID(v); err != nil {
		return "", uiBad("malformed entry id")
	}
	return v, nil
}

// consolePath is event.URLPath for a redirect of the console's own: its
// segments are names a handler read through their constructors, which
// URLPath can always write.
func consolePath(segments ...string) (string, error) {
	p, err := event.URLPath(segments...)
	if err != nil {
		return "", uiBad("%s", event.Problem(err))
	}
	return p, nil
}
