-- The ops page's charts: per minute over the last hour, how many messages entered the queue (queued, requeued) and
-- how many left it (sent, dead, cancelled), and how many Meta reported failed. Reads the last hour of the timeline
-- only, through its BRIN index on created_at (16-page ranges: schema.sql says why); minutes without events are
-- rows of zeros.
-- Its cost is one pass over the hour's events (100,000 in a minute after a bulk enqueue), so that pass does the
-- least per row: one count per (minute, event), not five filtered counts, and the minute from date_bin (integer
-- arithmetic) rather than date_trunc on a timestamptz (a time zone conversion per row). date_bin from a UTC
-- midnight gives the same instants as date_trunc('minute') in any time zone whose offset is whole minutes.
-- `sent` counts the timeline events states.SENT_EVENTS names (the sent_events parameter): a send whose answer was
-- lost and that a status webhook settled (`reconciled`) was sent too, as every other count of sent says.
-- Safe to repeat: a read.
WITH counts AS (
    SELECT date_bin('1 minute', e.created_at, timestamptz '2000-01-01 00:00:00+00') AS minute, e.event,
           count(*) AS n
    FROM wa_outbox.notification_events e
    WHERE e.created_at >= date_trunc('minute', now()) - interval '59 minutes'
      AND (e.event IN ('queued', 'requeued', 'failed', 'dead', 'cancelled') OR e.event = ANY (%(sent_events)s))
    GROUP BY 1, 2
)
SELECT m.minute,
       coalesce(sum(c.n) FILTER (WHERE c.event IN ('queued', 'requeued')), 0)::bigint AS entered,
       coalesce(sum(c.n) FILTER (WHERE c.event = ANY (%(sent_events)s)), 0)::bigint AS sent,
       coalesce(sum(c.n) FILTER (WHERE c.event = 'failed'), 0)::bigint AS failed,
       coalesce(sum(c.n) FILTER (WHERE c.event = 'dead'), 0)::bigint AS dead,
       coalesce(sum(c.n) FILTER (WHERE c.event = 'cancelled'), 0)::bigint AS cancelled
FROM generate_series(date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()),
                     interval '1 minute') AS m(minute)
LEFT JOIN counts c ON c.minute = m.minute
GROUP BY m.minute
ORDER BY m.minute
