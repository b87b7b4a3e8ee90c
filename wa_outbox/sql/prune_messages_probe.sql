-- Retention: the first message at or after id %(id)s and when it was created, plus the newest id. `wa-outbox prune`
-- bisects ids with it to find where messages created before the cutoff end (ids grow with created_at), so its
-- batches walk the primary key over old rows only and never scan the recent part of the table. One index probe.
-- Safe to repeat: it only reads.
SELECT p.id, p.created_at, (SELECT max(id) FROM wa_outbox.notifications) AS last_id
FROM (SELECT id, created_at FROM wa_outbox.notifications WHERE id >= %(id)s ORDER BY id LIMIT 1) p
RIGHT JOIN (SELECT 1) one ON true
