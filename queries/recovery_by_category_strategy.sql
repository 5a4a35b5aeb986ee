-- Recovery by category and strategy: of the entries that died in the
-- window, how many recovered (their task completed, by a replay or a
-- human's), and how many of those with no human in the way.
WITH rows_ AS (
  SELECT DISTINCT change_id, entry_id, category, strategy, transition, to_status, actor_role
  FROM jsdlq_forensics.changes
  WHERE created_at >= @since AND created_at < @until
),
entries AS (
  SELECT entry_id, category, strategy FROM rows_ WHERE transition = 'created'
),
outcome AS (
  SELECT e.entry_id, e.category, e.strategy,
    MAX(CASE WHEN r.to_status = 'recovered' THEN 1 ELSE 0 END) AS recovered,
    MAX(CASE WHEN r.actor_role <> '' THEN 1 ELSE 0 END) AS touched
  FROM entries e JOIN rows_ r ON r.entry_id = e.entry_id
  GROUP BY e.entry_id, e.category, e.strategy
)
SELECT category, strategy, COUNT(*) AS entries,
  SUM(recovered) AS recovered,
  SUM(CASE WHEN recovered = 1 AND touched = 0 THEN 1 ELSE 0 END) AS auto_recovered,
  ROUND(SUM(recovered) / COUNT(*), 4) AS recovery_rate
FROM outcome
GROUP BY category, strategy
ORDER BY category, strategy
