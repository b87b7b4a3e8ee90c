-- Record the processing outcome of a batch of webhook events, in one statement: done, retry later (queued + delay),
-- or dead. `refund` gives the claim's attempt back: a status waiting for its message's send to be recorded did not
-- fail, so waiting must not bring it closer to `dead`.
-- Safe to repeat: guarded by status and lease owner; a second run matches nothing.
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS o(id bigint, status text, delay double precision,
                                                               error text, refund boolean)
)
UPDATE wa_outbox.webhook_events w
SET status = o.status,
    attempts = w.attempts - CASE WHEN o.refund AND w.attempts > 0 THEN 1 ELSE 0 END,
    next_attempt_at = CASE WHEN o.status = 'queued' THEN now() + make_interval(secs => coalesce(o.delay, 0))
                           ELSE w.next_attempt_at END,
    last_error = coalesce(o.error, w.last_error),
    processed_at = CASE WHEN o.status IN ('done', 'dead') THEN now() END,
    locked_by = NULL, locked_until = NULL
FROM o
WHERE w.id = o.id AND w.status = 'processing' AND w.locked_by = %(worker_id)s
