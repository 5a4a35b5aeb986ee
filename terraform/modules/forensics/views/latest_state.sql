-- The latest state of every entry: its last row (the move with the latest
-- time), and "expired" once its expire_at has passed (Firestore's TTL
-- deletes it then; no row tells of that).
WITH rows_ AS (
  SELECT DISTINCT * FROM jsdlq_forensics.changes
),
last_ AS (
  SELECT entry_id, MAX(moved_at) AS moved_at FROM rows_ GROUP BY entry_id
)
SELECT r.entry_id, r.tenant, r.agent, r.task_type, r.stream, r.reason_code, r.category, r.action, r.strategy,
  r.to_status AS status,
  CASE WHEN r.expire_at <= CURRENT_TIMESTAMP THEN 'expired' ELSE r.to_status END AS state,
  r.attempt, r.root_id, r.replay_of, r.created_at, r.moved_at AS updated_at, r.expire_at
FROM rows_ r JOIN last_ l ON l.entry_id = r.entry_id AND l.moved_at = r.moved_at
