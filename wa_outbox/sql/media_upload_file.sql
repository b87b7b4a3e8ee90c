-- The outbound file a message names, as the worker uploads it: its kind, type, name, size and where its bytes are.
-- Safe to repeat: it only reads.
SELECT id, kind, mime_type, filename, size, store, store_key
FROM wa_outbox.media
WHERE id = %(media_id)s AND direction = 'outbound' AND state = 'stored'
