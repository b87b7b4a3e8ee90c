-- Give back this worker's claimed rows that never went on the wire. A claim whose COMMIT happened but whose reply was
-- lost (the connection dropped) leaves its rows `sending` under this worker's lease with no send thread holding
-- them; without this they would wait for the lease to expire, become `unknown` and wait out the unknown window.
-- Rows in flight (handed to a send thread, or sent and not yet recorded) are excluded by %(in_flight)s, so only rows
-- this worker knows it never sent return to `queued`: due now, their attempt given back, a `released` event.
-- Safe to repeat: guarded by status, lease owner and the ids in flight; a second run matches nothing.
WITH released AS (
    UPDATE wa_outbox.notifications n
    SET status = 'queued', attempts = greatest(0, n.attempts - 1), next_attempt_at = now(),
        locked_by = NULL, locked_until = NULL, updated_at = now()
    WHERE n.status = 'sending' AND n.locked_by = %(worker_id)s
      AND NOT (n.id = ANY (%(in_flight)s::bigint[]))
    RETURNING n.id, n.attempts, n.correlation_id
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'released', attempts,
           jsonb_build_object('worker', %(worker_id)s::text, 'reason', 'claimed, but the claim''s reply was lost'),
           correlation_id
    FROM released
)
SELECT id FROM released
