-- The sweep behind order per recipient: release the parked first message of any line that has no message going
-- (its release was missed: a claim parked it in the same instant as the statement finishing its predecessor looked
-- for it, or a path that finishes messages did not call wa_outbox.next_in_line). Walks only the lines that have
-- parked messages (notifications_blocked, one probe per line), so it costs nothing when nothing is parked.
-- Safe to repeat: releases only a parked message that is first in its line; a second run matches nothing.
WITH RECURSIVE lines AS (
    (SELECT n.phone_number_id, n.recipient FROM wa_outbox.notifications n
     WHERE n.blocked AND n.status = 'queued'
     ORDER BY n.phone_number_id, n.recipient LIMIT 1)
    UNION ALL
    SELECT next.phone_number_id, next.recipient
    FROM lines l,
         LATERAL (SELECT n.phone_number_id, n.recipient FROM wa_outbox.notifications n
                  WHERE n.blocked AND n.status = 'queued'
                    AND (n.phone_number_id, n.recipient) > (l.phone_number_id, l.recipient)
                  ORDER BY n.phone_number_id, n.recipient LIMIT 1) next
), stalled AS (
    SELECT head.id
    FROM lines l,
         LATERAL (SELECT h.id, h.blocked FROM wa_outbox.notifications h
                  WHERE h.phone_number_id = l.phone_number_id AND h.recipient = l.recipient AND h.ordered
                    AND h.status IN ('queued', 'sending', 'unknown')
                  ORDER BY h.id LIMIT 1) head
    WHERE head.blocked
      -- a later message of the line in flight: a retried message waits for it (requeue.sql), released when it ends
      AND NOT EXISTS (SELECT 1 FROM wa_outbox.notifications g
                      WHERE g.phone_number_id = l.phone_number_id AND g.recipient = l.recipient AND g.ordered
                        AND g.status IN ('sending', 'unknown'))
    LIMIT %(limit)s
)
UPDATE wa_outbox.notifications n
SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
FROM stalled s
WHERE n.id = s.id AND n.blocked AND n.status = 'queued'
RETURNING n.id
