-- Delete dead messages and their timelines, explicitly: by ids or all, optionally only older ones. The caller's
-- transaction has set wa_outbox.allow_prune, the timeline's only door.
WITH purged AS (
    DELETE FROM wa_outbox.notifications n
    WHERE n.status = 'dead'
      AND (n.id = ANY(%(ids)s::bigint[]) OR %(all)s)
      AND n.updated_at < now() - make_interval(days => %(older_than_days)s)
    RETURNING n.id
), timelines AS (
    DELETE FROM wa_outbox.notification_events e WHERE e.notification_id IN (SELECT id FROM purged)
)
SELECT count(*) FROM purged
