-- The live /ops session with this id (the SHA-256 of its cookie secret): the fingerprint of the token that opened
-- it; no row when it was logged out or expired. last_seen_at is moved only when a minute old: one write a minute
-- per session, not one per request.
-- Safe to repeat: a read, and a last_seen_at moved to now() again.
WITH live AS (
    SELECT s.id, s.token_fingerprint, s.last_seen_at FROM wa_outbox.ops_sessions s
    WHERE s.id = %(id)s AND s.expires_at > now()
), seen AS (
    UPDATE wa_outbox.ops_sessions s SET last_seen_at = now()
    FROM live WHERE s.id = live.id AND live.last_seen_at < now() - interval '1 minute'
)
SELECT live.token_fingerprint FROM live
