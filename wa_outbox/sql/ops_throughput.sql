-- The ops page's charts: per minute over the last hour, how many messages entered the queue (queued, requeued) and
-- how many left it (sent, dead, cancelled), and how many Meta reported failed. Reads the last hour of the timeline
-- only, through its BRIN index on created_at; minutes without events are rows of zeros.
-- Safe to repeat: a read.
WITH counts AS (
    SELECT date_trunc('minute', e.created_at) AS minute,
           count(*) FILTER (WHERE e.event IN ('queued', 'requeued')) AS entered,
           count(*) FILTER (WHERE e.event = 'sent') AS sent,
           count(*) FILTER (WHERE e.event = 'failed') AS failed,
           count(*) FILTER (WHERE e.event = 'dead') AS dead,
           count(*) FILTER (WHERE e.event = 'cancelled') AS cancelled
    FROM wa_outbox.notification_events e
    WHERE e.created_at >= date_trunc('minute', now()) - interval '59 minutes'
      AND e.event IN ('queued', 'requeued', 'sent', 'failed', 'dead', 'cancelled')
    GROUP BY 1
)
SELECT m.minute, coalesce(c.entered, 0) AS entered, coalesce(c.sent, 0) AS sent, coalesce(c.failed, 0) AS failed,
       coalesce(c.dead, 0) AS dead, coalesce(c.cancelled, 0) AS cancelled
FROM generate_series(date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()),
                     interval '1 minute') AS m(minute)
LEFT JOIN counts c ON c.minute = m.minute
ORDER BY m.minute
