-- Inbound messages open (or extend) the 24-hour customer-service window for their (business number, customer), and
-- those carrying media (image, audio, video, document, sticker: media_policy.media_of) get their media row, pending,
-- for the workers to fetch (worker/_media.py): one per media id, so a redelivered or re-run message creates nothing.
-- The inputs are parsed and clamped by worker/_inbound.py (contact_of, media_of); should a statement fail anyway, the
-- worker bisects the batch so only the event that fails is retried.
-- Safe to repeat: the window only moves forward (greatest); a media id already known is skipped.
WITH m AS (
    SELECT * FROM jsonb_to_recordset(%(messages)s::jsonb)
        AS m(event_id bigint, phone_number_id text, wa_id text, profile_name text, ts bigint, wamid text,
             media_id text, kind text, mime_type text, sha256 text, filename text)
), media AS (
    INSERT INTO wa_outbox.media (direction, meta_media_id, phone_number_id, wa_id, webhook_event_id, wamid, kind,
                                 mime_type, filename, declared_sha256, fetch_until)
    SELECT DISTINCT ON (m.media_id) 'inbound', m.media_id, m.phone_number_id, m.wa_id, m.event_id, m.wamid, m.kind,
           m.mime_type, m.filename, m.sha256,
           least(coalesce(to_timestamp(m.ts), now()), now()) + make_interval(secs => %(id_lifetime)s)
    FROM m
    WHERE m.media_id IS NOT NULL
    ORDER BY m.media_id, m.event_id
    ON CONFLICT (meta_media_id) WHERE direction = 'inbound' DO NOTHING
    RETURNING id
), contacts AS (
INSERT INTO wa_outbox.contacts AS c (phone_number_id, wa_id, profile_name, last_inbound_at)
SELECT m.phone_number_id, m.wa_id, max(m.profile_name), coalesce(to_timestamp(max(m.ts)), now())
FROM m
WHERE m.phone_number_id IS NOT NULL AND m.wa_id IS NOT NULL
GROUP BY m.phone_number_id, m.wa_id
ON CONFLICT (phone_number_id, wa_id) DO UPDATE
SET last_inbound_at = greatest(c.last_inbound_at, excluded.last_inbound_at),
    profile_name = coalesce(excluded.profile_name, c.profile_name),
    updated_at = now()
RETURNING 1
)
SELECT (SELECT count(*) FROM media) AS media, (SELECT count(*) FROM contacts) AS contacts
