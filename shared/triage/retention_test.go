package triage

import (
	"testing"
	"time"

	"github.com/jsdlq/jsdlq/internal/testenv"
	"github.com/jsdlq/jsdlq/shared/event"
)

const day = 24 * time.Hour

func TestParseRetention(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "30d", want: 30 * day},
		{in: "12h", want: 12 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "1h", want: time.Hour},
		{in: "3650d", want: 3650 * day},
		{in: "", wantErr: true},
		{in: "0h", wantErr: true},
		{in: "3651d", wantErr: true},
		{in: "30m", wantErr: true},
		{in: "12h1d", wantErr: true},
		{in: "-3d", wantErr: true},
		{in: "30 d", wantErr: true},
		{in: "99999999999d", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseRetention(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseRetention(%q) = %v, %v, want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
		// What is written back reads the same.
		if err == nil {
			if back, err := ParseRetention(FormatRetention(got)); err != nil || back != got {
				t.Errorf("ParseRetention(FormatRetention(%v) = %q) = %v, %v, want %v", got, FormatRetention(got), back, err, got)
			}
		}
	}
}

// retentionPolicy keeps permanent failures of devops 180 d and transient
// ones of marketing 7 d (testenv.RetentionRules), over agent, tenant and
// policy defaults.
func retentionPolicy(t *testing.T) *Policy {
	t.Helper()
	doc := edited(t, [2]string{"  retention: 30d\n", `  retention: 20d
  retention_by_agent: {devops: 90d, marketing: 14d}
  retention_by_tenant: {acme: 60d, globex: 2d}
`})
	return mustParse(t, string(testenv.WithRules(t, []byte(doc), testenv.RetentionRules)))
}

func TestEvaluateRetentionPrecedence(t *testing.T) {
	p := retentionPolicy(t)
	permanent := &event.Failure{Code: "impossible_task", Detail: "bad"}
	transient := &event.Failure{Code: "llm_provider_timeout", Detail: "slow"}
	tests := []struct {
		name string
		in   Input
		want time.Duration
	}{
		{"rule wins over agent and tenant", Input{Agent: "devops", Tenant: "acme", Failure: permanent}, 180 * day},
		{"rule of another agent", Input{Agent: "marketing", Tenant: "acme", Failure: transient}, 7 * day},
		{"agent wins over tenant", Input{Agent: "devops", Tenant: "acme", Failure: transient}, 90 * day},
		{"agent default without a rule", Input{Agent: "marketing", Tenant: "globex", Failure: permanent}, 14 * day},
		{"tenant default", Input{Agent: "research", Tenant: "globex", Failure: transient}, 2 * day},
		{"policy default", Input{Agent: "research", Tenant: "initech", Failure: transient}, 20 * day},
		{"no agent, no tenant", Input{Failure: permanent}, 20 * day},
	}
	for _, tc := range tests {
		tc.in.Kind, tc.in.Subject = "explicit", "agents.x.tasks.y"
		if got := p.Evaluate(tc.in, Chain{}).Retention; got != tc.want {
			t.Errorf("%s: Evaluate(%+v).Retention = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestDefaultPolicyRetention(t *testing.T) {
	in := Input{Kind: "explicit", Subject: "agents.a.tasks.b", Failure: &event.Failure{Code: "timeout"}}
	if got := Default().Evaluate(in, Chain{}).Retention; got != DefaultRetention {
		t.Errorf("Default().Evaluate(%+v).Retention = %v, want %v", in, got, DefaultRetention)
	}
}
