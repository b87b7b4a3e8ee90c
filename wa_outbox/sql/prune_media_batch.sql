-- Retention of media, step 2 of 2 (after prune_media_lock.sql, in its transaction): delete the locked rows in
-- %(ids)s that may go: inbound media, and outbound files no message names (notifications_upload: one probe each),
-- with their chunks and uploads to Meta (ON DELETE CASCADE). Returns what a bucket must delete too: the caller
-- removes those objects before it commits, so no row ever names a missing object.
-- Safe to repeat: it deletes only what is past the retention; a second run deletes the next batch, or nothing.
DELETE FROM wa_outbox.media m
WHERE m.id = ANY(%(ids)s::bigint[])
  AND (m.direction = 'inbound'
       OR NOT EXISTS (SELECT FROM wa_outbox.notifications n
                      WHERE n.message @? '$.*.upload'
                        AND n.message -> wa_outbox.message_type(n.message) ->> 'upload' = m.id::text))
RETURNING m.id, m.store, m.store_key
