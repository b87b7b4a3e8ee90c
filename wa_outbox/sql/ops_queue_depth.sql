-- The ops page: how many messages and inbound events wait in each live state, and how old the oldest is. One
-- branch per state, each answered from that state's partial index (never the whole table), and each stops counting
-- after %(cap)s rows (`capped`): the page needs a backlog's order of magnitude, and an exact count reads every row of
-- it (100,000 queued messages: ~350 ms). A capped branch's oldest is that of the rows it counted, which the index
-- serves oldest first for the queue and the dead; /metrics (queue_metrics.sql) counts all.
-- Safe to repeat: a read.
SELECT 'notifications' AS queue, 'queued' AS status, least(count(*), %(cap)s) AS rows, count(*) > %(cap)s AS capped,
       extract(epoch FROM now() - min(s.created_at)) AS oldest_age_seconds
FROM (SELECT n.created_at FROM wa_outbox.notifications n WHERE n.status = 'queued' ORDER BY n.created_at
      LIMIT %(cap)s + 1) s  -- notifications_queued_age (due, waiting and blocked alike): oldest first, index alone
UNION ALL
SELECT 'notifications', 'sending', least(count(*), %(cap)s), count(*) > %(cap)s,
       extract(epoch FROM now() - min(s.created_at))
FROM (SELECT n.created_at FROM wa_outbox.notifications n WHERE n.status = 'sending' LIMIT %(cap)s + 1) s
UNION ALL
SELECT 'notifications', 'unknown', least(count(*), %(cap)s), count(*) > %(cap)s,
       extract(epoch FROM now() - min(s.created_at))
FROM (SELECT n.created_at FROM wa_outbox.notifications n WHERE n.status = 'unknown' LIMIT %(cap)s + 1) s
UNION ALL
SELECT 'notifications', 'dead', least(count(*), %(cap)s), count(*) > %(cap)s,
       extract(epoch FROM now() - min(s.created_at))
FROM (SELECT n.created_at FROM wa_outbox.notifications n WHERE n.status = 'dead' ORDER BY n.created_at
      LIMIT %(cap)s + 1) s  -- notifications_dead_or_failed_age: oldest first, from the index alone
UNION ALL
SELECT 'webhook_events', 'queued', least(count(*), %(cap)s), count(*) > %(cap)s,
       extract(epoch FROM now() - min(s.received_at))
FROM (SELECT w.received_at FROM wa_outbox.webhook_events w WHERE w.status = 'queued' LIMIT %(cap)s + 1) s
UNION ALL
SELECT 'webhook_events', 'processing', least(count(*), %(cap)s), count(*) > %(cap)s,
       extract(epoch FROM now() - min(s.received_at))
FROM (SELECT w.received_at FROM wa_outbox.webhook_events w WHERE w.status = 'processing' LIMIT %(cap)s + 1) s
UNION ALL
SELECT 'webhook_events', 'dead', least(count(*), %(cap)s), count(*) > %(cap)s,
       extract(epoch FROM now() - min(s.received_at))
FROM (SELECT w.received_at FROM wa_outbox.webhook_events w WHERE w.status = 'dead' ORDER BY w.received_at
      LIMIT %(cap)s + 1) s
