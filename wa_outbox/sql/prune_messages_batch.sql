-- Retention: delete one bounded batch of finished messages with their timelines, walking the primary key from
-- %(after)s to %(until)s (never further: each statement reads a bounded id range, so it holds its locks for a
-- fraction of a second however many kept rows lie there). Only final states go (%(statuses)s: never queued, sending
-- or unknown, which a worker or a status webhook still acts on), and `dead` only when the operator asked
-- (%(dead_before)s not NULL). Rows another transaction holds (a status webhook being applied) are skipped, not
-- waited for: the next run takes them. FOR UPDATE re-checks the conditions on the row's newest version, so a row that
-- left its final state meanwhile stays. The caller's transaction has set wa_outbox.allow_prune (the timeline's door).
-- Returns how many messages and events went, and where the next batch starts.
WITH victims AS (
    SELECT n.id
    FROM wa_outbox.notifications n
    WHERE n.id > %(after)s AND n.id <= %(until)s
      AND ((n.status = ANY(%(statuses)s::text[]) AND n.updated_at < %(before)s)
           OR (n.status = 'dead' AND n.updated_at < %(dead_before)s))
    ORDER BY n.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), timelines AS (  -- = ANY(ARRAY(...)): one primary-key probe per message, never a scan of the timeline
    DELETE FROM wa_outbox.notification_events e
    WHERE e.notification_id = ANY(ARRAY(SELECT id FROM victims))
    RETURNING 1
), messages AS (
    DELETE FROM wa_outbox.notifications n
    WHERE n.id = ANY(ARRAY(SELECT id FROM victims))
    RETURNING n.id
)
SELECT (SELECT count(*) FROM messages) AS messages, (SELECT count(*) FROM timelines) AS events,
       CASE WHEN (SELECT count(*) FROM victims) >= %(limit)s THEN (SELECT max(id) FROM victims)
            ELSE %(until)s END AS next_after
