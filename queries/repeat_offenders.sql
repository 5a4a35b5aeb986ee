-- Repeat offenders: per tenant, agent and task type, the deaths in the
-- window and how many of them followed another death of the same task type
-- by the same agent within a week before.
WITH deaths AS (
  SELECT DISTINCT change_id, tenant, agent, task_type, UNIX_MICROS(moved_at) AS us
  FROM jsdlq_forensics.changes
  WHERE transition = 'created' AND moved_at >= @since AND moved_at < @until
),
repeats AS (
  SELECT d.change_id
  FROM deaths d
  WHERE EXISTS (
    SELECT 1 FROM deaths p
    WHERE p.tenant = d.tenant AND p.agent = d.agent AND p.task_type = d.task_type
      AND p.change_id <> d.change_id AND p.us <= d.us AND p.us > d.us - 604800000000)
)
SELECT d.tenant, d.agent, d.task_type, COUNT(*) AS deaths, COUNT(r.change_id) AS repeats
FROM deaths d LEFT JOIN repeats r ON r.change_id = d.change_id
GROUP BY d.tenant, d.agent, d.task_type
HAVING COUNT(r.change_id) > 0
ORDER BY repeats DESC, d.tenant, d.agent, d.task_type
