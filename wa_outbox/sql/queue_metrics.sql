-- For /metrics at scrape time: queue depths and ages, dead letters, worker heartbeats, paused senders.
-- Safe to repeat: a read.
SELECT 'notifications' AS queue, status, rows, coalesce(oldest_age_seconds, 0) AS age FROM wa_outbox.queue_health
WHERE queue = 'notifications'
UNION ALL
SELECT 'webhook_events', status, rows, coalesce(oldest_age_seconds, 0) FROM wa_outbox.queue_health
WHERE queue = 'webhook_events'
UNION ALL
SELECT 'workers', 'alive', count(*) FILTER (WHERE heartbeat_at > now() - interval '30 seconds'),
       coalesce(extract(epoch FROM now() - max(heartbeat_at)), -1)
FROM wa_outbox.workers
UNION ALL
SELECT 'senders', 'paused', count(*) FILTER (WHERE paused_until > now()), 0 FROM wa_outbox.rate_limits
