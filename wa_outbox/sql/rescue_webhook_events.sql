-- Webhook events whose worker died mid-processing go back to the queue (processing is idempotent; application
-- handlers are called at least once) -- or, when the claim that was lost was their last attempt, to `dead`: an event
-- that kills its worker every time must not be retried forever. Attempts are counted at claim time.
-- Safe to repeat: guarded by status and lease expiry; a second run matches nothing.
UPDATE wa_outbox.webhook_events w
SET status = CASE WHEN w.attempts >= coalesce(w.max_attempts, %(max_attempts)s) THEN 'dead' ELSE 'queued' END,
    next_attempt_at = now(), locked_by = NULL, locked_until = NULL,
    processed_at = CASE WHEN w.attempts >= coalesce(w.max_attempts, %(max_attempts)s) THEN now() END,
    last_error = 'the worker lost its lease during processing'
WHERE w.id IN (SELECT id FROM wa_outbox.webhook_events
               WHERE status = 'processing' AND locked_until < now()
               ORDER BY locked_until LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
  AND w.status = 'processing' AND w.locked_until < now()
RETURNING w.status  -- `dead` ones are counted in wa_outbox_dead_letters_total
