-- Undo version 5, in reverse order of its sections.

-- == Pacing ===========================================================================================================

DROP FUNCTION wa_outbox.return_pair_reservations(bigint[], text, double precision);

-- == Webhook ingest ===================================================================================================

-- == Bulk enqueue =====================================================================================================

-- == Claim and record =================================================================================================

-- == Ops queries ======================================================================================================
-- Version 4's timeline index and dead-letter index (as version 3 made them), view, and no index of the queue's age.
DROP INDEX wa_outbox.notification_events_created_at;
CREATE INDEX notification_events_created_at ON wa_outbox.notification_events USING brin (created_at)
    WITH (autosummarize = on);
DROP INDEX wa_outbox.notifications_dead_code;
CREATE INDEX notifications_dead_code ON wa_outbox.notifications ((coalesce(last_error ->> 'code', '')), id)
    WHERE status = 'dead';
CREATE OR REPLACE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, 'queued'::text AS status, sum(q.rows)::bigint AS rows,
       min(q.oldest_due) AS oldest_due, extract(epoch FROM now() - min(q.oldest)) AS oldest_age_seconds
FROM (  -- due or waiting (notifications_due), and parked behind an earlier message (notifications_blocked)
    SELECT count(*) AS rows, min(next_attempt_at) AS oldest_due, min(created_at) AS oldest
    FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked
    UNION ALL
    SELECT count(*), min(next_attempt_at), min(created_at)
    FROM wa_outbox.notifications WHERE status = 'queued' AND blocked
) q
HAVING sum(q.rows) > 0
UNION ALL
SELECT 'notifications', 'sending', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'sending' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'unknown', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'unknown' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'dead', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'dead' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'queued', count(*), min(next_attempt_at), extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'queued' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'processing', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'processing' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'dead', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'dead' HAVING count(*) > 0;
DROP INDEX wa_outbox.notifications_queued_age;

-- == History flatness =================================================================================================
-- Version 4's definitions: the default fill factor (pages already written keep their layout: no rewrite).
ALTER TABLE wa_outbox.contacts RESET (fillfactor);
ALTER TABLE wa_outbox.notifications RESET (fillfactor);

SELECT 1;
