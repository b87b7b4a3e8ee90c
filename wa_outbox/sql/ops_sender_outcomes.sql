-- The ops page's outcomes per sender: per minute over the last hour, how many of each sender's messages were sent
-- (Meta accepted them), delivered, read, failed (Meta's word after accepting) and dead (the dead-letter queue), with
-- the sender's alias and display number from the registry. Only (sender, minute) pairs with an outcome are rows:
-- the page fills the other minutes with zeros (ops.sender_outcomes), on ops_throughput's minutes.
-- The timeline has no sender column, so each event is attributed through its message. Its cost: one pass over the
-- hour's outcome events through the timeline's BRIN index (as ops_throughput.sql), then one primary-key look-up per
-- distinct message among them (a message's sent, delivered and read share one), never a scan of notifications.
-- %(since)s (NULL: the whole hour) narrows it to the minutes from then on: the page keeps the minutes that are over
-- (ops.sender_outcomes) and asks only for the last few, so a refresh reads a few minutes of the timeline, not an hour.
-- `sent` counts the timeline events states.SENT_EVENTS names (%(sent_events)s, as ops_throughput.sql): a send whose
-- answer was lost and that a status webhook later settled is sent too.
-- Safe to repeat: a read.
WITH hour AS (
    SELECT date_bin('1 minute', e.created_at, timestamptz '2000-01-01 00:00:00+00') AS minute, e.notification_id,
           e.event
    FROM wa_outbox.notification_events e
    WHERE e.created_at >= greatest(date_trunc('minute', now()) - interval '59 minutes',
                                   coalesce(%(since)s::timestamptz, '-infinity'))
      AND (e.event IN ('delivered', 'read', 'failed', 'dead') OR e.event = ANY (%(sent_events)s))
), owner AS MATERIALIZED (  -- each message looked up once, not once per event
    -- A scalar subquery: one primary-key look-up per message, whatever the planner guesses of their number (as a
    -- join it may plan a merge over the whole primary key: 10 million entries for 30,000 messages).
    SELECT m.notification_id,
           (SELECT n.phone_number_id FROM wa_outbox.notifications n WHERE n.id = m.notification_id) AS phone_number_id
    FROM (SELECT DISTINCT h.notification_id FROM hour h) m
), counts AS (
    SELECT o.phone_number_id, h.minute,
           count(*) FILTER (WHERE h.event = ANY (%(sent_events)s)) AS sent,
           count(*) FILTER (WHERE h.event = 'delivered') AS delivered,
           count(*) FILTER (WHERE h.event = 'read') AS read,
           count(*) FILTER (WHERE h.event = 'failed') AS failed,
           count(*) FILTER (WHERE h.event = 'dead') AS dead
    FROM hour h
    JOIN owner o ON o.notification_id = h.notification_id
    WHERE o.phone_number_id IS NOT NULL  -- purged since its event was read
    GROUP BY o.phone_number_id, h.minute
)
SELECT c.phone_number_id, s.alias, s.display_phone_number, c.minute, c.sent, c.delivered, c.read, c.failed, c.dead
FROM counts c
LEFT JOIN wa_outbox.senders s ON s.phone_number_id = c.phone_number_id  -- the registry's labels, after counting
ORDER BY c.phone_number_id, c.minute
