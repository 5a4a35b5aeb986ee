-- Time from dead to a human decision, per category: for each entry that
-- died in the window and that a human (operator, approver, tenant or the
-- triage agent) acted on, the age of the first such act; its median and
-- 95th percentile (nearest rank), in milliseconds.
WITH rows_ AS (
  SELECT DISTINCT change_id, entry_id, category, created_at, actor_role, age_ms
  FROM jsdlq_forensics.changes
  WHERE created_at >= @since AND created_at < @until
),
firsts AS (
  SELECT entry_id, category, MIN(age_ms) AS ms
  FROM rows_
  WHERE actor_role <> ''
  GROUP BY entry_id, category
),
ranked AS (
  SELECT category, ms,
    ROW_NUMBER() OVER (PARTITION BY category ORDER BY ms) AS rn,
    COUNT(*) OVER (PARTITION BY category) AS n
  FROM firsts
)
SELECT category, n AS entries,
  MIN(CASE WHEN rn >= CEIL(0.5 * n) THEN ms END) AS median_ms,
  MIN(CASE WHEN rn >= CEIL(0.95 * n) THEN ms END) AS p95_ms
FROM ranked
GROUP BY category, n
ORDER BY category
