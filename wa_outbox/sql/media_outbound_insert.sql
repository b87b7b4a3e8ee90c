-- A file the app hands over to be sent (POST /v1/media, wa_outbox.upload_media()): its media row, written inside
-- the caller's transaction before its bytes (media_chunks refers to it); media_outbound_stored.sql completes it.
INSERT INTO wa_outbox.media (direction, kind, mime_type, filename, state, store, size, stored_at)
VALUES ('outbound', %(kind)s, %(mime_type)s, %(filename)s, 'stored', %(store)s, 0, now())
RETURNING id
