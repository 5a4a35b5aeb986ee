-- Predictions against actual deaths, per agent and task type: of the first
-- deaths in the window (not a replay's), how many the agent kit's pre-flight
-- had predicted, how many of those with the right reason, and the mean
-- predicted probability of the predicted ones.
WITH deaths AS (
  SELECT DISTINCT change_id, agent, task_type, reason_code, predicted_reason, predicted_probability
  FROM jsdlq_forensics.changes
  WHERE transition = 'created' AND replay_of = '' AND moved_at >= @since AND moved_at < @until
)
SELECT agent, task_type, COUNT(*) AS deaths,
  SUM(CASE WHEN predicted_reason <> '' THEN 1 ELSE 0 END) AS predicted,
  SUM(CASE WHEN predicted_reason <> '' AND predicted_reason = reason_code THEN 1 ELSE 0 END) AS predicted_right,
  ROUND(AVG(CASE WHEN predicted_reason <> '' THEN predicted_probability END), 4) AS mean_probability
FROM deaths
GROUP BY agent, task_type
ORDER BY agent, task_type
