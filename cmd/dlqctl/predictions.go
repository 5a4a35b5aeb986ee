package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
)

// predictionsView is what dlqctl predictions shows: the model agentkit's
// pre-flight acts on, and how the policy in force treats each of its rows.
type predictionsView struct {
	// Model is nil before the first learning run.
	Model  *predict.Model    `json:"model"`
	Policy predictionsPolicy `json:"policy"`
	Rows   []predictionRow   `json:"rows"`
	Apply  map[string]string `json:"apply"`
}

type predictionsPolicy struct {
	Version    string  `json:"version"`
	Source     string  `json:"source"`
	Enabled    bool    `json:"enabled"`
	MinSupport int64   `json:"min_support"`
	Threshold  float64 `json:"threshold"`
}

// predictionRow is one row of the model with the policy's view of it.
type predictionRow struct {
	predict.Prediction
	// Now is the action the policy in force gives the row ("" none) and
	// Why says why; the row's own Action is what the pre-flight does until
	// the next learning run rewrites the model.
	Now string `json:"policy_action"`
	Why string `json:"policy_why"`
}

func (a *app) cmdPredictions(ctx context.Context, args []string) error {
	asJSON, err := parseJSONOnly("predictions", args)
	if err != nil {
		return err
	}
	if a.scope != "" {
		return usagef("the predictions are learnt from every tenant's tasks; a caller limited to tenant %q cannot see them", a.scope)
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	cur, err := a.currentPolicy(ctx)
	if err != nil {
		return err
	}
	pol := cur.policy
	set := pol.Predictions()
	v := predictionsView{Rows: []predictionRow{}, Apply: set.Apply, Policy: predictionsPolicy{Version: pol.Version(), Source: cur.evaluated(),
		Enabled: set.Enabled, MinSupport: set.MinSupport, Threshold: set.Threshold}}
	m, err := st.PredictionModel(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	default:
		v.Model = &m
		for _, p := range m.Predictions {
			u := pol.Use(p)
			v.Rows = append(v.Rows, predictionRow{Prediction: p, Now: u.Action.Action, Why: u.Why})
		}
	}
	if asJSON {
		return writeJSON(a.stdout, v)
	}
	a.printPredictions(v)
	return nil
}

func (a *app) printPredictions(v predictionsView) {
	p := v.Policy
	state := "enabled"
	if !p.Enabled {
		state = "disabled"
	}
	outf(a.stdout, "policy %s (%s): predictions %s, min_support %d, threshold %.2f\n", p.Version, p.Source, state, p.MinSupport, p.Threshold)
	var apply []string
	for _, r := range slices.Sorted(maps.Keys(v.Apply)) {
		apply = append(apply, r+" → "+v.Apply[r])
	}
	outf(a.stdout, "apply: %s\n", orDash(strings.Join(apply, ", ")))
	m := v.Model
	if m == nil {
		fmt.Fprintln(a.stdout, "no model yet: reconcile learns one once tasks are published through agentkit's Publish and some of them died")
		return
	}
	outf(a.stdout, "model version %d, trained %s (%s ago) under policy %s, min support %d, threshold %.2f: %d of %d cells predict\n",
		m.Version, m.TrainedAt.Format(time.RFC3339), a.clock().Sub(m.TrainedAt).Round(time.Second), orDash(m.PolicyVersion),
		m.MinSupport, m.Threshold, len(m.Predictions), m.Cells)
	if m.PolicyVersion != "" && m.PolicyVersion != p.Version {
		outf(a.stdout, "the model was written under policy %s: the pre-flight acts on its ACTION column until the next learning run applies %s (POLICY NOW)\n",
			m.PolicyVersion, p.Version)
	}
	if len(v.Rows) == 0 {
		fmt.Fprintln(a.stdout, "no cell has enough support and confidence to predict anything")
		return
	}
	tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nAGENT\tTASK TYPE\tFEATURE\tBUCKET\tTASKS\tDEATHS\tPROBABILITY\tCONFIDENCE\tREASON\tSHARE\tACTION\tPOLICY NOW")
	for _, r := range v.Rows {
		action := r.Action
		switch {
		case action == predict.ActionStrategy:
			action += " " + r.Strategy
		case action == "":
			action = "advisory"
		}
		outf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.2f\t%.2f\t%s\t%.2f\t%s\t%s\n", r.Agent, orDash(r.TaskType), r.Feature, r.Bucket,
			r.Tasks, r.Deaths, r.Probability, r.Confidence, orDash(r.Reason), r.ReasonShare, action, r.Why)
	}
	tw.Flush()
}
