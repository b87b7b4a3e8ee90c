-- Claim up to %(limit)s inbound media due for fetching (same lease rules as the outbox: FOR UPDATE SKIP LOCKED, the
-- attempt counted at claim time, the lease renewed by nothing: it covers the longest fetch, worker/_media.py).
WITH due AS (
    SELECT m.id FROM wa_outbox.media m
    WHERE m.state = 'pending' AND m.next_attempt_at <= now()
    ORDER BY m.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE wa_outbox.media m
SET state = 'fetching', attempts = m.attempts + 1, locked_by = %(worker_id)s,
    locked_until = now() + make_interval(secs => %(lease_seconds)s)
FROM due
WHERE m.id = due.id
RETURNING m.id, m.meta_media_id, m.phone_number_id, m.wa_id, m.wamid, m.kind, m.mime_type, m.filename,
          m.declared_sha256, m.attempts,
          extract(epoch FROM coalesce(m.fetch_until, m.created_at + interval '7 days') - now())::float8
              AS seconds_left,
          m.corrupt_fetches
