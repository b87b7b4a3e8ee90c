-- For /metrics at scrape time: queue depths and ages, dead letters (dead and Meta-failed), worker heartbeats, paused
-- senders. Exact counts, each from a partial index alone where the rows can be many (queued: notifications_queued_age;
-- dead and failed: notifications_dead_or_failed_age), so a scrape reads no heap row per message on pages VACUUM has
-- marked all-visible.
-- Safe to repeat: a read.
SELECT 'notifications' AS queue, status, rows, coalesce(oldest_age_seconds, 0) AS age FROM wa_outbox.queue_health
WHERE queue = 'notifications'
UNION ALL  -- Meta-`failed` messages are in the dead-letter queue too (notifications_dead_or_failed_age)
SELECT 'notifications', 'failed', count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)
FROM wa_outbox.notifications WHERE status = 'failed'
UNION ALL
SELECT 'webhook_events', status, rows, coalesce(oldest_age_seconds, 0) FROM wa_outbox.queue_health
WHERE queue = 'webhook_events'
UNION ALL
SELECT 'workers', 'alive', count(*) FILTER (WHERE heartbeat_at > now() - interval '30 seconds'),
       coalesce(extract(epoch FROM now() - max(heartbeat_at)), -1)
FROM wa_outbox.workers
UNION ALL
SELECT 'senders', 'paused', count(*) FILTER (WHERE paused_until > now()), 0 FROM wa_outbox.rate_limits
