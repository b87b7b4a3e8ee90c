-- Cancel messages that are still `queued` (`wa-outbox cancel`, POST /v1/messages/<id>/cancel): they become
-- `cancelled` with a `cancelled` timeline event naming who asked. A message in any other state is left as it is
-- (a claimed one may already be on the wire) and reported with its status, so the caller can say why; ids that match
-- nothing are simply absent from the result. The row lock makes a claim and a cancel of the same message exclusive.
-- Cancelling the first message of a recipient's line lets the next one go.
WITH target AS (
    SELECT n.id, n.status FROM wa_outbox.notifications n
    WHERE n.id = ANY(%(ids)s::bigint[])
    ORDER BY n.id
    FOR UPDATE
), cancelled AS (
    UPDATE wa_outbox.notifications n
    SET status = 'cancelled', updated_at = now()
    FROM target t WHERE n.id = t.id AND t.status = 'queued'
    RETURNING n.id, n.attempts, n.correlation_id
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'cancelled', attempts, jsonb_build_object('by', %(actor)s::text), correlation_id FROM cancelled
), released AS (  -- the order rule (wa_outbox.next_in_line): the next message of each line it led may go
    UPDATE wa_outbox.notifications n
    SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
    WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(SELECT id FROM cancelled)))
      AND n.blocked AND n.status = 'queued'
)
SELECT t.id, CASE WHEN c.id IS NOT NULL THEN 'cancelled' ELSE t.status END AS status, c.id IS NOT NULL AS cancelled
FROM target t LEFT JOIN cancelled c USING (id)
ORDER BY t.id
