package console

import (
	"html/template"
	"net/http"
	"net/url"
	"sort"

	"github.com/jsdlq/jsdlq/shared/audit"
)

// This file is the audits pages: reconcile's reports, newest first, and
// one report with its findings, sections, tenant health and traffic.

// auditsPageSize is how many reports a page of the audits list shows.
const auditsPageSize = 25

// auditsData is the audits list.
type auditsData struct {
	Reports []*audit.Report
	Next    template.URL // built from url.Values: a relative URL with an encoded query
}

func (s *Server) audits(r *http.Request) (string, string, any, error) {
	vals, err := pageQuery(r, "the audits list takes one page_token", "page_token")
	if err != nil {
		return "", "", nil, err
	}
	reports, next, err := s.store.ListAudits(r.Context(), auditsPageSize, vals.Get("page_token"))
	if err != nil {
		return "", "", nil, err
	}
	d := auditsData{Reports: reports}
	if next != "" {
		d.Next = template.URL("/audits?" + url.Values{"page_token": {next}}.Encode())
	}
	return "audits", "Audits", d, nil
}

// reportData is one report: its alerting findings first.
type reportData struct {
	R        *audit.Report
	Alerts   []*audit.Finding
	Repaired []*audit.Finding // findings without an alert (repairs)
}

func (s *Server) auditReport(r *http.Request) (string, string, any, error) {
	if _, err := pageQuery(r, "an audit report takes none"); err != nil {
		return "", "", nil, err
	}
	rep, err := s.store.GetAudit(r.Context(), r.PathValue("run"))
	if err != nil {
		return "", "", nil, err
	}
	d := reportData{R: rep}
	for _, f := range rep.Findings {
		if f.Alert {
			d.Alerts = append(d.Alerts, f)
		} else {
			d.Repaired = append(d.Repaired, f)
		}
	}
	// Errors before warnings, then by name and tenant.
	sev := map[string]int{audit.SevError: 0, audit.SevWarning: 1, audit.SevInfo: 2}
	sort.SliceStable(d.Alerts, func(i, j int) bool {
		a, b := d.Alerts[i], d.Alerts[j]
		if sev[a.Severity] != sev[b.Severity] {
			return sev[a.Severity] < sev[b.Severity]
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Tenant < b.Tenant
	})
	return "audit", "Audit " + rep.RunID, d, nil
}
