-- The ops page: the newest campaigns with their messages counted by status (notifications_campaign).
-- Safe to repeat: a read.
SELECT c.id, c.name, c.phone_number_id, c.status, c.pause_reason, c.created_at, c.updated_at,
       coalesce((SELECT jsonb_object_agg(s.status, s.count)
                 FROM (SELECT n.status, count(*) AS count FROM wa_outbox.notifications n
                       WHERE n.campaign_id = c.id GROUP BY n.status) s), '{}'::jsonb) AS counts
FROM wa_outbox.campaigns c
ORDER BY c.id DESC
LIMIT %(limit)s
