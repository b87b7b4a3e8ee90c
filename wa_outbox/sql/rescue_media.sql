-- Inbound media whose worker died mid-fetch go back to the queue at once (a fetch is repeatable: nothing was stored,
-- or the stored bytes are written again under the same key).
-- Safe to repeat: guarded by state and lease expiry; a second run matches nothing.
UPDATE wa_outbox.media m
SET state = 'pending', next_attempt_at = now(), locked_by = NULL, locked_until = NULL,
    last_error = '{"error": "the worker lost its lease during the fetch"}'::jsonb
WHERE m.id IN (SELECT id FROM wa_outbox.media
               WHERE state = 'fetching' AND locked_until < now()
               ORDER BY locked_until LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
  AND m.state = 'fetching' AND m.locked_until < now()
RETURNING m.id
