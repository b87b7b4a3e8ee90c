-- Version 4: scale. One section per concern; the down file undoes them in reverse order.

-- == Pacing per sender ============================================================================================

-- == Bulk enqueue ==================================================================================================

-- == History and retention =========================================================================================
-- Dead letters (dead, and Meta-failed) counted and aged from an index alone: the /metrics scrape, `queue_health` and
-- the ops page no longer read one heap row per dead letter (they grow with history: one in a hundred messages).
CREATE INDEX notifications_dead_or_failed_age ON wa_outbox.notifications (status, created_at)
    WHERE status IN ('dead', 'failed');
-- The same view, one branch per state, each read from that state's partial index: GROUP BY over
-- `status IN (...)` scanned the whole table (every finished message) on each /metrics scrape.
CREATE OR REPLACE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, 'queued'::text AS status, sum(q.rows)::bigint AS rows,
       min(q.oldest_due) AS oldest_due, extract(epoch FROM now() - min(q.oldest)) AS oldest_age_seconds
FROM (  -- due or waiting (notifications_due), and parked behind an earlier message (notifications_blocked)
    SELECT count(*) AS rows, min(next_attempt_at) AS oldest_due, min(created_at) AS oldest
    FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked
    UNION ALL
    SELECT count(*), min(next_attempt_at), min(created_at)
    FROM wa_outbox.notifications WHERE status = 'queued' AND blocked
) q
HAVING sum(q.rows) > 0
UNION ALL
SELECT 'notifications', 'sending', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'sending' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'unknown', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'unknown' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'dead', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'dead' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'queued', count(*), min(next_attempt_at), extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'queued' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'processing', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'processing' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'dead', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'dead' HAVING count(*) > 0;

-- == Webhook ingest ================================================================================================

-- == Claim and record ==============================================================================================
SELECT 1;
