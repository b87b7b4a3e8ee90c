-- Retention: finished messages (with their timelines) and processed webhook events older than the retention.
-- Webhook dedup keys are kept at least 8 days, beyond Meta's 7-day redelivery window. The caller's transaction
-- has set wa_outbox.allow_prune.
WITH messages AS (
    DELETE FROM wa_outbox.notifications n
    WHERE n.status IN ('sent', 'delivered', 'read', 'failed', 'cancelled')
      AND n.updated_at < now() - make_interval(days => %(days)s)
    RETURNING n.id
), timelines AS (
    DELETE FROM wa_outbox.notification_events e WHERE e.notification_id IN (SELECT id FROM messages)
), webhooks AS (
    DELETE FROM wa_outbox.webhook_events w
    WHERE w.status = 'done' AND w.received_at < now() - make_interval(days => greatest(%(days)s, 8))
    RETURNING 1
)
SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM webhooks)
