-- Webhook events whose worker died mid-processing go back to the queue (processing is idempotent; application
-- handlers are called at least once).
UPDATE wa_outbox.webhook_events w
SET status = 'queued', next_attempt_at = now(), locked_by = NULL, locked_until = NULL,
    last_error = 'the worker lost its lease during processing'
WHERE w.id IN (SELECT id FROM wa_outbox.webhook_events
               WHERE status = 'processing' AND locked_until < now()
               ORDER BY locked_until LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
  AND w.status = 'processing' AND w.locked_until < now()
