-- A new signing secret for an endpoint (wa-outbox endpoints rotate-secret, POST /v1/endpoints/<id>/rotate-secret):
-- the current one becomes the previous one and keeps signing beside the new one until previous_secret_until, so a
-- receiver can switch secrets without refusing a delivery. A rotation during an overlap drops the older secret.
-- Not safe to repeat: a second run would push out the secret the caller was just given.
UPDATE wa_outbox.endpoints
SET previous_secret_enc = secret_enc,
    previous_secret_until = now() + make_interval(secs => %(overlap_seconds)s),
    secret_enc = %(secret_enc)s, secret_fingerprint = %(secret_fingerprint)s, updated_at = now()
WHERE id = %(id)s
RETURNING id, secret_fingerprint, previous_secret_until
