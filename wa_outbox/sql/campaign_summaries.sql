-- Campaigns with their messages counted by status (wa-outbox campaign list/show, GET /v1/campaigns): all, or the
-- one named. The sender's configured rate, its messages sent in the last minute, and when the campaign began
-- sending feed `show`'s rate and expected end. Counts come from the notifications_campaign index.
-- Safe to repeat: a read.
SELECT c.id, c.name, c.phone_number_id, c.status, c.pause_reason, c.created_at, c.updated_at,
       coalesce(counts.by_status, '{}'::jsonb) AS counts,
       coalesce(counts.total, 0) AS total,
       r.mps AS sender_mps,
       timing.started_at, timing.sent_last_minute
FROM wa_outbox.campaigns c
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(s.status, s.n) AS by_status, sum(s.n)::bigint AS total
    FROM (SELECT n.status, count(*) AS n FROM wa_outbox.notifications n WHERE n.campaign_id = c.id
          GROUP BY n.status) s
) counts ON true
LEFT JOIN wa_outbox.rate_limits r ON r.phone_number_id = c.phone_number_id
LEFT JOIN LATERAL (
    SELECT min(n.sent_at) AS started_at,
           count(*) FILTER (WHERE n.sent_at > now() - interval '1 minute') AS sent_last_minute
    FROM wa_outbox.notifications n
    WHERE n.campaign_id = c.id AND n.sent_at IS NOT NULL AND %(name)s::text IS NOT NULL
) timing ON true
WHERE %(name)s::text IS NULL OR c.name = %(name)s
ORDER BY c.id DESC
