-- Requeue dead (or Meta-`failed`) messages: attempts start over, and the timeline says who asked. By ids, or all
-- messages of the dead-letter queue (dead and failed, as list_dead.sql shows it) matching the filters.
-- Where a retried message goes (docs/message-life.md, "Per recipient"):
--  * in its priority's queue, to the back: due from the moment of the retry, so behind every message already due
--    (the claim takes them by next_attempt_at), never ahead of them; a batch keeps its order, by id, 1 µs apart;
--  * in its recipient's line, back to its original place (lines are ordered by id): that recipient's later messages
--    still queued wait for it. A later message of its line in flight (sending, unknown) is not overtaken either: the
--    retried one is parked (`blocked`) until the statement finishing that send releases it (next_in_line).
WITH target AS (
    SELECT n.id, n.status, n.phone_number_id, n.recipient, n.ordered FROM wa_outbox.notifications n
    WHERE n.status IN ('dead', 'failed')
      AND (n.id = ANY(%(ids)s::bigint[])
           OR (%(all)s
               AND (%(code)s::integer IS NULL OR (n.last_error ->> 'code')::integer = %(code)s)
               AND (%(recipient)s::text IS NULL OR n.recipient = %(recipient)s)))
    ORDER BY n.id
    FOR UPDATE
), placed AS (
    SELECT t.id, t.status, row_number() OVER (ORDER BY t.id) - 1 AS position,
           t.ordered AND EXISTS (  -- one probe of notifications_line per message
               SELECT 1 FROM wa_outbox.notifications p
               WHERE p.phone_number_id = t.phone_number_id AND p.recipient = t.recipient AND p.ordered
                 AND p.status IN ('sending', 'unknown') AND p.id > t.id) AS behind_a_send
    FROM target t
), requeued AS (
    UPDATE wa_outbox.notifications n
    SET status = 'queued', attempts = 0, next_attempt_at = now() + make_interval(secs => p.position / 1e6),
        blocked = p.behind_a_send, unknown_since = NULL, updated_at = now()
    FROM placed p WHERE n.id = p.id
    RETURNING n.id, n.correlation_id, p.status AS was
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'requeued', 0, jsonb_build_object('from', was, 'by', %(actor)s::text), correlation_id FROM requeued
), woken AS (
    SELECT pg_notify('wa_outbox_notifications', '') FROM requeued LIMIT 1
)
SELECT id FROM requeued, (SELECT count(*) FROM woken) w ORDER BY id
