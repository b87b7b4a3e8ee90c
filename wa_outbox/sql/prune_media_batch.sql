-- Retention of inbound media: delete one bounded batch of the oldest media rows older than %(days)s days, whatever
-- their state but `fetching` (a worker holds it), with their chunks (ON DELETE CASCADE). Returns what a bucket must
-- delete too: the caller removes those objects before it commits, so no row ever names a missing object.
-- Safe to repeat: it deletes only what is past the retention; a second run deletes the next batch, or nothing.
DELETE FROM wa_outbox.media m
WHERE m.id IN (SELECT id FROM wa_outbox.media
               WHERE direction = 'inbound' AND state <> 'fetching'
                 AND created_at < now() - make_interval(days => %(days)s)
               ORDER BY created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING m.id, m.store, m.store_key
