-- Undo version 4, in reverse order of its sections.

-- == Claim and record ==============================================================================================

-- == Webhook ingest ================================================================================================

-- == History and retention =========================================================================================
CREATE OR REPLACE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, status, count(*) AS rows,
       min(next_attempt_at) FILTER (WHERE status = 'queued') AS oldest_due,
       extract(epoch FROM now() - min(created_at)) AS oldest_age_seconds
FROM wa_outbox.notifications
WHERE status IN ('queued', 'sending', 'unknown', 'dead')
GROUP BY status
UNION ALL
SELECT 'webhook_events', status, count(*),
       min(next_attempt_at) FILTER (WHERE status = 'queued'),
       extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events
WHERE status IN ('queued', 'processing', 'dead')
GROUP BY status;
DROP INDEX wa_outbox.notifications_dead_or_failed_age;

-- == Bulk enqueue ==================================================================================================

-- == Pacing per sender ============================================================================================
SELECT 1;
