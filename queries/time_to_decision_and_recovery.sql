-- Time from dead to a human decision and to recovery, per category: for
-- each entry that died in the window, the age of the first act of a human
-- on it (operator, approver, tenant or the triage agent; measure
-- 'decision') and of its recovery (measure 'recovery'); their median and
-- 95th percentile (nearest rank), in milliseconds.
WITH rows_ AS (
  SELECT DISTINCT change_id, entry_id, category, created_at, actor_role, to_status, age_ms
  FROM jsdlq_forensics.changes
  WHERE created_at >= @since AND created_at < @until
),
firsts AS (
  SELECT 'decision' AS measure, entry_id, category, MIN(age_ms) AS ms
  FROM rows_ WHERE actor_role <> '' GROUP BY entry_id, category
  UNION ALL
  SELECT 'recovery' AS measure, entry_id, category, MIN(age_ms) AS ms
  FROM rows_ WHERE to_status = 'recovered' GROUP BY entry_id, category
),
ranked AS (
  SELECT measure, category, ms,
    ROW_NUMBER() OVER (PARTITION BY measure, category ORDER BY ms) AS rn,
    COUNT(*) OVER (PARTITION BY measure, category) AS n
  FROM firsts
)
SELECT measure, category, n AS entries,
  MIN(CASE WHEN rn >= CEIL(0.5 * n) THEN ms END) AS median_ms,
  MIN(CASE WHEN rn >= CEIL(0.95 * n) THEN ms END) AS p95_ms
FROM ranked
GROUP BY measure, category, n
ORDER BY measure, category
