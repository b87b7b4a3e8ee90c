-- Record the outcomes of a batch of sends in one statement. Each outcome names the row's next status and timeline
-- event; the UPDATE only applies while the row is still `sending` under this worker's lease, so a send that
-- finished after the rescuer took the row changes nothing (the rescuer and a late finisher cannot both win).
-- Outcome fields: id, status, event, wamid, error, delay (seconds until the next attempt, for `queued`),
-- refund (give the attempt back: throttling is not the message's fault), detail.
-- Safe to repeat: guarded by status and lease owner; a second run matches nothing.
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(outcomes)s::jsonb)
        AS o(id bigint, status text, event text, wamid text, error jsonb, delay double precision, refund boolean,
             detail jsonb)
), locked AS (  -- in id order, as apply_statuses.sql locks, so the two never deadlock
    SELECT n.id FROM wa_outbox.notifications n
    -- = ANY(ARRAY(…)): primary-key look-ups whatever the statistics say; a join here can turn quadratic when the
    -- planner believes few rows are `sending`.
    WHERE n.id = ANY (ARRAY(SELECT id FROM o)) AND n.status = 'sending' AND n.locked_by = %(worker_id)s
    ORDER BY n.id
    FOR UPDATE
), updated AS (
    UPDATE wa_outbox.notifications n
    SET status = o.status,
        attempts = n.attempts - CASE WHEN o.refund THEN 1 ELSE 0 END,
        wamid = coalesce(o.wamid, n.wamid),
        last_error = coalesce(o.error, n.last_error),
        -- A row given back unsent and due at once (its slot slipped, the worker stopped) keeps its due time, so it
        -- keeps its place among the messages claimed after it (a campaign goes out in its order).
        next_attempt_at = CASE WHEN o.status = 'queued' AND o.event = 'released' AND coalesce(o.delay, 0) = 0
                               THEN least(n.next_attempt_at, now())
                               WHEN o.status = 'queued'
                               THEN now() + make_interval(secs => coalesce(o.delay, 0)) ELSE n.next_attempt_at END,
        sent_at = CASE WHEN o.status = 'sent' THEN now() ELSE n.sent_at END,
        unknown_since = CASE WHEN o.status = 'unknown' THEN now() END,
        locked_by = NULL, locked_until = NULL, updated_at = now()
    FROM o
    WHERE n.id = o.id AND n.id = ANY (ARRAY(SELECT id FROM locked))
      AND n.status = 'sending' AND n.locked_by = %(worker_id)s
    RETURNING n.id, n.attempts, n.correlation_id, n.phone_number_id, n.recipient, o.status, o.event, o.detail
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, event, attempts, detail, correlation_id FROM updated
), released AS (  -- order per recipient: a message sent or dead lets the next one of its line go
    UPDATE wa_outbox.notifications n
    SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
    WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(SELECT id FROM updated WHERE status IN ('sent', 'dead'))))
      AND n.blocked AND n.status = 'queued'
    RETURNING n.id
), woken AS (  -- a released message is due now: wake the workers (at commit) rather than wait for their next poll
    SELECT pg_notify('wa_outbox_notifications', '') FROM released LIMIT 1
), paired AS (  -- a successful send clears a recipient's pair-rate strikes
    UPDATE wa_outbox.contacts c SET pair_strikes = 0, pair_paused_until = NULL, updated_at = now()
    FROM updated u
    WHERE u.status = 'sent' AND c.phone_number_id = u.phone_number_id AND c.wa_id = u.recipient
      AND c.pair_strikes > 0
)
SELECT id, status FROM updated
WHERE (SELECT count(*) FROM woken) >= 0  -- evaluated once, first: the wake-up runs whatever was updated
