-- Deliveries whose worker lost its lease (killed, frozen) go back to the queue, due now: the receiver may have got
-- it already (deliveries are at least once; the webhook-id is the same, for the receiver to deduplicate) -- or to
-- `failed` when the lost attempt was the schedule's last (%(max_attempts)s: attempts are counted at claim).
-- Safe to repeat: guarded by status and lease expiry; a second run matches nothing.
UPDATE wa_outbox.deliveries d
SET status = CASE WHEN d.attempts >= %(max_attempts)s THEN 'failed' ELSE 'queued' END,
    next_attempt_at = now(), locked_by = NULL, locked_until = NULL, updated_at = now(),
    last_error = 'the worker lost its lease during the delivery'
WHERE d.id IN (SELECT id FROM wa_outbox.deliveries
               WHERE status = 'delivering' AND locked_until < now()
               ORDER BY locked_until LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
  AND d.status = 'delivering' AND d.locked_until < now()
RETURNING d.id, d.status
