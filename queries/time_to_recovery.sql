-- Time from dead to recovery, per category: for each entry that died in
-- the window and recovered, the age of its recovery; its median and 95th
-- percentile (nearest rank), in milliseconds.
WITH rows_ AS (
  SELECT DISTINCT change_id, entry_id, category, created_at, to_status, age_ms
  FROM jsdlq_forensics.changes
  WHERE created_at >= @since AND created_at < @until
),
firsts AS (
  SELECT entry_id, category, MIN(age_ms) AS ms
  FROM rows_
  WHERE to_status = 'recovered'
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
