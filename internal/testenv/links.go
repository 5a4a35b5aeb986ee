package testenv

import (
	"cmp"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// Link is one link or form of a page: where it points, resolved as a
// browser resolves it against the page (dot segments removed), and the
// text of the first cell of the table row it is in ("" outside a table).
type Link struct {
	Kind   string // "a" or "form"
	Method string // a form's method ("get" for a link)
	To     *url.URL
	Row    string
}

// Links parses page, served at pageURL, and returns its links and forms:
// what a browser would follow or post to.
func Links(t testing.TB, pageURL, page string) []Link {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	base, err := url.Parse(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	attr := func(n *html.Node, key string) (string, bool) {
		for _, a := range n.Attr {
			if a.Key == key {
				return a.Val, true
			}
		}
		return "", false
	}
	var out []Link
	var walk func(n *html.Node, row string)
	walk = func(n *html.Node, row string) {
		if n.Type == html.ElementNode {
			if n.Data == "tr" {
				row = nodeText(n.FirstChild)
			}
			target, ok := attr(n, map[string]string{"a": "href", "form": "action"}[n.Data])
			if ok && (n.Data == "a" || n.Data == "form") {
				ref, err := url.Parse(target)
				if err != nil {
					t.Errorf("%s %q on %s is no URL: %v", n.Data, target, pageURL, err)
				} else {
					method, _ := attr(n, "method")
					out = append(out, Link{Kind: n.Data, Method: strings.ToLower(cmp.Or(method, "get")), To: base.ResolveReference(ref), Row: row})
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, row)
		}
	}
	walk(doc, "")
	return out
}

// nodeText is the text of n and its children.
func nodeText(n *html.Node) string {
	if n == nil {
		return ""
	}
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(nodeText(c))
	}
	return b.String()
}

// Segments are u's path segments, each unescaped as net/http's router
// gives them to a handler.
func Segments(t testing.TB, u *url.URL) []string {
	t.Helper()
	var out []string
	for _, s := range strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/") {
		v, err := url.PathUnescape(s)
		if err != nil {
			t.Errorf("%s: segment %q does not unescape: %v", u, s, err)
		}
		out = append(out, v)
	}
	return out
}
