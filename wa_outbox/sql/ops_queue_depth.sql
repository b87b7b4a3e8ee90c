-- The ops page: how many messages and inbound events wait in each live state, and how old the oldest is. One
-- branch per state, each answered from that state's partial index (never the whole table).
-- Safe to repeat: a read.
SELECT 'notifications' AS queue, 'queued' AS status, sum(q.rows) AS rows,
       extract(epoch FROM now() - min(q.oldest)) AS oldest_age_seconds
FROM (  -- due or waiting (notifications_due), and parked behind an earlier message to the same recipient
    SELECT count(*) AS rows, min(n.created_at) AS oldest
    FROM wa_outbox.notifications n WHERE n.status = 'queued' AND NOT n.blocked
    UNION ALL
    SELECT count(*), min(n.created_at) FROM wa_outbox.notifications n WHERE n.status = 'queued' AND n.blocked
) q
UNION ALL
SELECT 'notifications', 'sending', count(*), extract(epoch FROM now() - min(n.created_at))
FROM wa_outbox.notifications n WHERE n.status = 'sending'
UNION ALL
SELECT 'notifications', 'unknown', count(*), extract(epoch FROM now() - min(n.created_at))
FROM wa_outbox.notifications n WHERE n.status = 'unknown'
UNION ALL
SELECT 'notifications', 'dead', count(*), extract(epoch FROM now() - min(n.created_at))
FROM wa_outbox.notifications n WHERE n.status = 'dead'
UNION ALL
SELECT 'webhook_events', 'queued', count(*), extract(epoch FROM now() - min(w.received_at))
FROM wa_outbox.webhook_events w WHERE w.status = 'queued'
UNION ALL
SELECT 'webhook_events', 'processing', count(*), extract(epoch FROM now() - min(w.received_at))
FROM wa_outbox.webhook_events w WHERE w.status = 'processing'
UNION ALL
SELECT 'webhook_events', 'dead', count(*), extract(epoch FROM now() - min(w.received_at))
FROM wa_outbox.webhook_events w WHERE w.status = 'dead'
