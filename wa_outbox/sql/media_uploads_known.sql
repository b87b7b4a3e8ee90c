-- Meta's media ids for a claim's uploads, per sender, still valid for at least %(margin_s)s seconds (a send made
-- now is fetched by Meta well within that): one statement per claim (worker/_uploads.py). A pair without a row
-- here is uploaded (again) before its send. The file's name comes along (a document sent without one gets it).
-- Safe to repeat: it only reads.
SELECT u.media_id, u.phone_number_id, u.meta_media_id, m.filename
FROM unnest(%(media_ids)s::bigint[], %(senders)s::text[]) AS wanted (media_id, phone_number_id)
JOIN wa_outbox.media_uploads u ON u.media_id = wanted.media_id AND u.phone_number_id = wanted.phone_number_id
JOIN wa_outbox.media m ON m.id = u.media_id
WHERE u.expires_at > now() + make_interval(secs => %(margin_s)s)
