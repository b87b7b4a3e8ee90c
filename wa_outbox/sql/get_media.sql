-- One media row by the id an app holds: Meta's media id as the webhook carried it, or wa-outbox's own id (a number;
-- Meta's match first). GET /v1/media/<id>, `wa-outbox media show|get`.
SELECT m.id, m.direction, m.meta_media_id, m.phone_number_id, m.wa_id, m.wamid, m.kind, m.mime_type, m.filename,
       m.declared_sha256, m.declared_size, encode(m.sha256, 'hex') AS sha256, m.size, m.state, m.store,
       m.store_key, m.attempts, m.next_attempt_at, m.fetch_until, m.last_error, m.created_at, m.stored_at
FROM wa_outbox.media m
WHERE m.meta_media_id = %(given)s
   OR (%(own_id)s::bigint IS NOT NULL AND m.id = %(own_id)s::bigint)
ORDER BY m.meta_media_id = %(given)s DESC NULLS LAST
LIMIT 1
