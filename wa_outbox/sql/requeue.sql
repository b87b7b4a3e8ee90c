-- Requeue dead (or Meta-`failed`) messages: attempts start over, and the timeline says who asked. By ids, or all
-- messages of the dead-letter queue (dead and failed, as list_dead.sql shows it) matching the filters.
WITH target AS (
    SELECT n.id, n.status FROM wa_outbox.notifications n
    WHERE n.status IN ('dead', 'failed')
      AND (n.id = ANY(%(ids)s::bigint[])
           OR (%(all)s
               AND (%(code)s::integer IS NULL OR (n.last_error ->> 'code')::integer = %(code)s)
               AND (%(recipient)s::text IS NULL OR n.recipient = %(recipient)s)))
    ORDER BY n.id
    FOR UPDATE
), requeued AS (
    UPDATE wa_outbox.notifications n
    SET status = 'queued', attempts = 0, next_attempt_at = now(), blocked = false, unknown_since = NULL, updated_at = now()
    FROM target t WHERE n.id = t.id
    RETURNING n.id, n.correlation_id, t.status AS was
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'requeued', 0, jsonb_build_object('from', was, 'by', %(actor)s::text), correlation_id FROM requeued
), woken AS (
    SELECT pg_notify('wa_outbox_notifications', '') FROM requeued LIMIT 1
)
SELECT id FROM requeued, (SELECT count(*) FROM woken) w ORDER BY id
