package triage

import "strings"

func validSubjectPattern(s string) bool {
	if s == "" {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" || strings.ContainsAny(t, " \t\r\n") {
			return false
		}
		if strings.Contains(t, ">") && (t != ">" || i != len(toks)-1) {
			return false
		}
		if strings.Contains(t, "*") && t != "*" {
			return false
		}
	}
	return true
}

// SubjectMatches reports whether a NATS subject matches a pattern with the
// wildcards * (one token) and > (one or more trailing tokens).
func SubjectMatches(pattern, subject string) bool {
	pt := strings.Split(pattern, ".")
	st := strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if p != "*" && p != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}
