-- Retention: the first webhook event at or after id %(id)s and when it was received, plus the newest id. `wa-outbox
-- prune` bisects ids with it to find where events received before the cutoff end (ids grow with received_at), so its
-- batches walk the primary key over old rows only. One index probe.
-- Safe to repeat: it only reads.
SELECT p.id, p.received_at AS created_at, (SELECT max(id) FROM wa_outbox.webhook_events) AS last_id
FROM (SELECT id, received_at FROM wa_outbox.webhook_events WHERE id >= %(id)s ORDER BY id LIMIT 1) p
RIGHT JOIN (SELECT 1) one ON true
