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
UNION ALL  -- deliveries to endpoints: queued (its age: the oldest undelivered event's wait), in flight, failed
SELECT 'deliveries', status, count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)
FROM wa_outbox.deliveries WHERE status IN ('queued', 'delivering', 'failed') GROUP BY status
UNION ALL
SELECT 'endpoints', state, count(*), 0 FROM wa_outbox.endpoints GROUP BY state
UNION ALL  -- how far the push engine is behind (wa_outbox_deliveries_lag_seconds): the oldest event an enabled
-- endpoint has not had dispatched (one index probe per endpoint), or the most overdue due delivery of one
SELECT 'deliveries', 'lag', 0, coalesce(greatest(
    (SELECT extract(epoch FROM now() - min(next.occurred_at)) FROM wa_outbox.endpoints e
     CROSS JOIN LATERAL (SELECT ev.occurred_at FROM wa_outbox.events ev
                         WHERE (ev.txid, ev.seq) > (e.cursor_txid, e.cursor_seq)
                         ORDER BY ev.txid, ev.seq LIMIT 1) next
     WHERE e.state = 'enabled'),
    (SELECT extract(epoch FROM now() - min(d.next_attempt_at)) FROM wa_outbox.endpoints e
     CROSS JOIN LATERAL (SELECT d.next_attempt_at FROM wa_outbox.deliveries d
                         WHERE d.endpoint_id = e.id AND d.status = 'queued' AND d.next_attempt_at <= now()
                         ORDER BY d.next_attempt_at LIMIT 1) d
     WHERE e.state = 'enabled')), 0)
-- templates (issue 20): messages held by their template now (the notifications_template_held index), templates
-- paused or disabled (Meta's words), and category changes Meta announced that are not in effect yet (`age`: seconds
-- until the soonest takes effect)
UNION ALL
SELECT 'templates', 'held', count(*), coalesce(extract(epoch FROM now() - min(updated_at)), 0)
FROM wa_outbox.notifications
WHERE hold_reason IN ('template_paused', 'template_not_approved') AND status = 'queued'
UNION ALL
SELECT 'templates', lower(status), count(*), 0 FROM wa_outbox.templates
WHERE status IN ('PAUSED', 'DISABLED') GROUP BY status
UNION ALL
SELECT 'templates', 'category_change_pending', count(*),
       coalesce(extract(epoch FROM min(category_change_at) - now()), 0)
FROM wa_outbox.templates WHERE category_pending IS NOT NULL AND category_change_at > now()
UNION ALL  -- the messaging limit of each portfolio with one (issue 20): units left now (rows) and messages held by it
-- (age column: their count), per portfolio (status: its id); portfolios without a limit are not shown
SELECT 'portfolios', po.portfolio_id,
       greatest(0, po.messaging_limit - (SELECT count(*) FROM wa_outbox.portfolio_units u
                                         WHERE u.portfolio_id = po.portfolio_id
                                           AND u.counted_at > now() - interval '24 hours')),
       (SELECT count(*) FROM wa_outbox.notifications n
        WHERE n.hold_reason = 'messaging_limit' AND n.status = 'queued'
          AND n.phone_number_id IN (SELECT s.phone_number_id FROM wa_outbox.senders s
                                    JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
                                    WHERE b.portfolio_id = po.portfolio_id))
FROM wa_outbox.portfolios po WHERE po.messaging_limit IS NOT NULL
