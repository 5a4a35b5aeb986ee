-- Top reason codes per agent: the five commonest reasons the agent's tasks
-- died of in the window, with their share of the agent's deaths.
WITH deaths AS (
  SELECT DISTINCT change_id, agent, reason_code
  FROM jsdlq_forensics.changes
  WHERE transition = 'created' AND moved_at >= @since AND moved_at < @until
),
counted AS (
  SELECT agent, reason_code, COUNT(*) AS deaths
  FROM deaths
  GROUP BY agent, reason_code
),
ranked AS (
  SELECT agent, reason_code, deaths,
    SUM(deaths) OVER (PARTITION BY agent) AS agent_deaths,
    ROW_NUMBER() OVER (PARTITION BY agent ORDER BY deaths DESC, reason_code) AS rank_in_agent
  FROM counted
)
SELECT agent, rank_in_agent, reason_code, deaths, ROUND(deaths / agent_deaths, 4) AS share
FROM ranked
WHERE rank_in_agent <= 5
ORDER BY agent, rank_in_agent
