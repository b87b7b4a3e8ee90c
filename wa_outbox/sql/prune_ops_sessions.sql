-- `wa-outbox prune`: the /ops sessions past their end (ops_sessions_expires_at).
-- Safe to repeat: deleting deleted rows does nothing.
WITH expired AS (
    DELETE FROM wa_outbox.ops_sessions s WHERE s.expires_at <= now() RETURNING 1
)
SELECT count(*) AS ops_sessions FROM expired
