-- Claim up to %(limit)s stored webhook events for processing (same lease rules as the outbox).
WITH due AS (
    SELECT w.id FROM wa_outbox.webhook_events w
    WHERE w.status = 'queued' AND w.next_attempt_at <= now()
    ORDER BY w.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE wa_outbox.webhook_events w
SET status = 'processing', attempts = w.attempts + 1, locked_by = %(worker_id)s,
    locked_until = now() + make_interval(secs => %(lease_seconds)s)
FROM due
WHERE w.id = due.id
RETURNING w.id, w.kind, w.field, w.phone_number_id, w.wamid, w.update_status, w.payload, w.attempts, w.max_attempts,
          w.correlation_id
