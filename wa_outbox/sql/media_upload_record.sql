-- Meta's media id for a file uploaded for a sender, reused until expires_at (valid_s: a little less than Meta's 30
-- days); an expired row is replaced.
INSERT INTO wa_outbox.media_uploads AS u (media_id, phone_number_id, meta_media_id, uploaded_at, expires_at)
VALUES (%(media_id)s, %(phone_number_id)s, %(meta_media_id)s, now(), now() + make_interval(secs => %(valid_s)s))
ON CONFLICT (media_id, phone_number_id) DO UPDATE
    SET meta_media_id = EXCLUDED.meta_media_id, uploaded_at = EXCLUDED.uploaded_at, expires_at = EXCLUDED.expires_at
RETURNING u.expires_at
