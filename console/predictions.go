package console

import (
	"errors"
	"maps"
	"net/http"
	"slices"

	"github.com/jsdlq/jsdlq/shared/predict"
	"github.com/jsdlq/jsdlq/shared/store"
	"github.com/jsdlq/jsdlq/shared/triage"
)

// This file is the predictions page: the model the agents' pre-flight acts
// on (written by reconcile's learner) and how the policy in force treats
// each of its rows. It changes nothing; the policy switches predictions
// off (docs/predictions.md).

// predictionsData is the predictions page.
type predictionsData struct {
	PolicyVersion string
	Settings      triage.PredictionSettings
	Apply         []applyRow
	// Model is nil before the first learning run.
	Model *predict.Model
	// Stale: the model was written under another policy; its actions hold
	// until the next learning run.
	Stale bool
	Rows  []predictionRow
}

type applyRow struct{ Reason, Action string }

// predictionRow is a row of the model and the policy's view of it now.
type predictionRow struct {
	predict.Prediction
	Use triage.PredictionUse
}

func (s *Server) predictions(r *http.Request) (string, string, any, error) {
	ctx := r.Context()
	if _, err := pageQuery(r, "the predictions page takes none"); err != nil {
		return "", "", nil, err
	}
	in, err := s.store.PolicyInForce(ctx)
	if err != nil {
		return "", "", nil, err
	}
	p := in.Policy
	set := p.Predictions()
	d := predictionsData{PolicyVersion: p.Version(), Settings: set}
	for _, reason := range slices.Sorted(maps.Keys(set.Apply)) {
		d.Apply = append(d.Apply, applyRow{Reason: reason, Action: set.Apply[reason]})
	}
	m, err := s.store.PredictionModel(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return "", "", nil, err
	default:
		d.Model = &m
		d.Stale = m.PolicyVersion != "" && m.PolicyVersion != p.Version()
		for _, row := range m.Predictions {
			d.Rows = append(d.Rows, predictionRow{Prediction: row, Use: p.Use(row)})
		}
	}
	return "predictions", "Predictions", d, nil
}
