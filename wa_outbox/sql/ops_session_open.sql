-- A new /ops session (wa_outbox/web/ops_sessions.py): the SHA-256 of its cookie secret, the fingerprint of the token
-- that opened it, its end. The sessions already expired go in the same statement (ops_sessions_expires_at).
WITH expired AS (
    DELETE FROM wa_outbox.ops_sessions s WHERE s.expires_at <= now()
)
INSERT INTO wa_outbox.ops_sessions (id, token_fingerprint, expires_at)
VALUES (%(id)s, %(token_fingerprint)s, now() + make_interval(secs => %(lifetime_seconds)s))
