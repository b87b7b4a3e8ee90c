-- The ops page: every worker with its heartbeat and what it reported doing (in flight, counters), by id.
-- Safe to repeat: a read.
SELECT w.id, w.hostname, w.pid, w.state, w.started_at, w.heartbeat_at,
       extract(epoch FROM now() - w.heartbeat_at) AS heartbeat_age_seconds, w.info
FROM wa_outbox.workers w
ORDER BY w.id
