-- A fetched media's bytes are kept (in media_chunks by the same transaction, or in the bucket already): mark it
-- stored and emit its media.ready event in this one statement, so the event exists exactly when the bytes do, once.
-- Guarded by the lease: a fetch whose lease was rescued meanwhile stores nothing (the caller rolls back).
WITH stored AS (
    UPDATE wa_outbox.media m
    SET state = 'stored', store = %(store)s, store_key = %(store_key)s, size = %(size)s, sha256 = %(sha256)s,
        mime_type = coalesce(m.mime_type, %(mime_type)s),
        declared_size = coalesce(%(declared_size)s, m.declared_size),
        declared_sha256 = coalesce(m.declared_sha256, %(declared_sha256)s),
        stored_at = now(), last_error = NULL, locked_by = NULL, locked_until = NULL
    WHERE m.id = %(id)s AND m.locked_by = %(worker_id)s AND m.state = 'fetching'
    RETURNING m.*
), emitted AS (
    INSERT INTO wa_outbox.events (type, phone_number_id, wa_id, data)
    SELECT 'media.ready', s.phone_number_id, s.wa_id, jsonb_build_object(
               'schema_version', 1, 'id', s.id, 'media_id', s.meta_media_id, 'kind', s.kind,
               'mime_type', s.mime_type, 'filename', s.filename, 'size', s.size, 'sha256', encode(s.sha256, 'hex'),
               'wamid', s.wamid, 'phone_number_id', s.phone_number_id, 'wa_id', s.wa_id,
               'webhook_event_id', s.webhook_event_id)
    FROM stored s
    RETURNING seq
)
SELECT s.id, (SELECT min(seq) FROM emitted) AS event_seq
FROM stored s CROSS JOIN LATERAL (SELECT wa_outbox.notify_events()) woken
