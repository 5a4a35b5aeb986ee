-- Daily outcomes per category: per UTC day of the moves and category, the
-- entries that died, recovered, were discarded, were handed to a human and
-- were set aside that day.
WITH rows_ AS (
  SELECT DISTINCT change_id, category, transition, CAST(moved_at AS DATE) AS day
  FROM jsdlq_forensics.changes
)
SELECT day, category,
  SUM(CASE WHEN transition = 'created' THEN 1 ELSE 0 END) AS died,
  SUM(CASE WHEN transition = 'recovered' THEN 1 ELSE 0 END) AS recovered,
  SUM(CASE WHEN transition = 'discarded' THEN 1 ELSE 0 END) AS discarded,
  SUM(CASE WHEN transition = 'decided' THEN 1 ELSE 0 END) AS to_a_human,
  SUM(CASE WHEN transition = 'quarantined' THEN 1 ELSE 0 END) AS quarantined
FROM rows_
GROUP BY day, category
