-- Recover rows whose worker lost its lease (killed, frozen, partitioned). Such a row may have reached Meta, so it
-- becomes `unknown`, to be settled by a status webhook (biz_opaque_callback_data carries its id) or, after the
-- window, by the configured policy. Guarded by state and lease expiry: a finisher that records first wins, and then
-- this UPDATE no longer matches the row.
-- Safe to repeat: guarded by status and lease expiry; a second run matches nothing.
WITH expired AS (
    SELECT n.id, n.locked_by
    FROM wa_outbox.notifications n
    WHERE n.status = 'sending' AND n.locked_until < now()
    ORDER BY n.locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE wa_outbox.notifications n
    SET status = 'unknown', unknown_since = now(), locked_by = NULL, locked_until = NULL, updated_at = now(),
        last_error = jsonb_build_object('message', 'the worker lost its lease during the send', 'worker', e.locked_by)
    FROM expired e
    WHERE n.id = e.id AND n.status = 'sending' AND n.locked_until < now()
    RETURNING n.id, n.attempts, n.correlation_id, e.locked_by
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'unknown', attempts,
           jsonb_build_object('reason', 'lease expired', 'lost_by', locked_by, 'rescued_by', %(worker_id)s::text),
           correlation_id
    FROM rescued
)
SELECT count(*) AS rescued FROM rescued
