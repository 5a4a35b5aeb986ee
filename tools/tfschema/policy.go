package tfschema

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Violation is one breach of the deployment's IAM rules found in a plan.
type Violation struct {
	Address string
	Problem string
}

func (v Violation) String() string { return v.Address + ": " + v.Problem }

// BaseProjectRoles are the project-level roles every component may hold:
// neither has a narrower, resource-level form.
var BaseProjectRoles = []string{"roles/logging.logWriter", "roles/monitoring.metricWriter"}

var publicPrincipals = []string{"allUsers", "allAuthenticatedUsers"}

type planJSON struct {
	ResourceChanges []struct {
		Address string `json:"address"`
		Type    string `json:"type"`
		Change  struct {
			Actions []string `json:"actions"`
			After   any      `json:"after"`
		} `json:"change"`
	} `json:"resource_changes"`
}

// CheckPlan applies the IAM rules of terraform/README.md to the JSON of a
// plan (`terraform show -json PLANFILE`):
//   - no value anywhere names allUsers or allAuthenticatedUsers;
//   - project-level IAM is only additive members (no *_iam_binding or
//     *_iam_policy on the project, which would take roles from others);
//   - a project-level role other than BaseProjectRoles must appear in the
//     README on a line that gives it as a project-level grant, i.e. listed
//     with its reason.
func CheckPlan(plan []byte, readme string) ([]Violation, error) {
	var p planJSON
	if err := json.Unmarshal(plan, &p); err != nil {
		return nil, fmt.Errorf("tfschema: decode plan JSON: %w", err)
	}
	var out []Violation
	for _, rc := range p.ResourceChanges {
		if len(rc.Change.Actions) == 1 && rc.Change.Actions[0] == "delete" {
			continue
		}
		for _, s := range stringsIn(rc.Change.After) {
			for _, principal := range publicPrincipals {
				if strings.Contains(s, principal) {
					out = append(out, Violation{rc.Address, fmt.Sprintf("grants to %s (%q)", principal, s)})
				}
			}
		}
		switch rc.Type {
		case "google_project_iam_binding", "google_project_iam_policy", "google_project_iam_audit_config":
			out = append(out, Violation{rc.Address, rc.Type + " is authoritative at project level; use google_project_iam_member"})
		case "google_project_iam_member":
			after, _ := rc.Change.After.(map[string]any)
			role, _ := after["role"].(string)
			if role == "" {
				out = append(out, Violation{rc.Address, "project-level role is not known at plan time"})
				continue
			}
			if !isBaseRole(role) && !listedAsProjectRole(readme, role) {
				out = append(out, Violation{rc.Address, fmt.Sprintf("project-level %s is not listed with its reason in terraform/README.md", role)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

func isBaseRole(role string) bool {
	for _, r := range BaseProjectRoles {
		if r == role {
			return true
		}
	}
	return false
}

// listedAsProjectRole reports whether some README line names the role
// (as `role` or role) together with "project" and a reason column, the
// shape of a row of the roles table.
func listedAsProjectRole(readme, role string) bool {
	for _, line := range strings.Split(readme, "\n") {
		if strings.Contains(line, role) && strings.Contains(strings.ToLower(line), "project") && strings.Count(line, "|") >= 5 {
			return true
		}
	}
	return false
}

func stringsIn(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, stringsIn(e)...)
		}
		return out
	case map[string]any:
		var out []string
		for _, e := range v {
			out = append(out, stringsIn(e)...)
		}
		return out
	}
	return nil
}
