package reconciler

import "github.com/jsdlq/jsdlq/shared/config"

// ReadConfig reads the engine's settings from the environment with r (its
// problems join r's, so every one is reported at once): the reconcile
// function and dlqctl audit read the same variables the same way. Unset
// settings stay zero, so Config's defaults apply.
func ReadConfig(r *config.Reader) Config {
	var c Config
	c.WorkStreams = r.List("WORK_STREAMS")
	c.TimeBudget = r.Duration("RECONCILE_TIME_BUDGET", 0)
	c.ProbeTimeout = r.Duration("RECONCILE_PROBE_TIMEOUT", 0)
	c.AdvisoryStream, c.RecordStream = config.ReadCaptureStreams(r)
	c.BridgeConsumer = r.String("BRIDGE_CONSUMER", "")
	c.CaptureFillAlert = float64(r.Int("RECONCILE_CAPTURE_FILL_ALERT_PERCENT", 0, 0, 100)) / 100
	c.OutcomeTolerance = float64(r.Int("RECONCILE_OUTCOME_TOLERANCE_PERCENT", 0, 0, 100)) / 100
	c.OutcomeMinGap = r.Int("RECONCILE_OUTCOME_MIN_GAP", 0, 0, 1_000_000)
	c.Predict = readPredictConfig(r)
	return c
}
