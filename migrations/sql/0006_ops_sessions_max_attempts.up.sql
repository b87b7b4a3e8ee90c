-- Version 6: /ops sessions kept in Postgres, and version 1's per-row attempt limits handed back to the retry policy.
-- One section per concern; each section's undo is in 0006_ops_sessions_max_attempts.down.sql, in reverse order.

-- == /ops sessions ====================================================================================================
-- One row per logged-in /ops session (wa_outbox/web/ops_sessions.py): login inserts it, logout deletes it, and every
-- /ops request looks it up, so a copied cookie stops working the moment its session is logged out or its token
-- leaves WA_OUTBOX_API_TOKENS. Nothing in a row can be used as a session or a token: the cookie carries a random
-- 256-bit secret and the table only its SHA-256; the token is kept as an HMAC under the app secret (a fingerprint
-- to tell which token opened the session, never the token).
CREATE TABLE wa_outbox.ops_sessions (
    id                 bytea PRIMARY KEY CHECK (length(id) = 32),                 -- sha256 of the cookie's secret
    token_fingerprint  bytea NOT NULL CHECK (length(token_fingerprint) = 32),    -- HMAC-SHA256 of the API token
    created_at         timestamptz NOT NULL DEFAULT now(),
    last_seen_at       timestamptz NOT NULL DEFAULT now(),                        -- moved at most once a minute
    expires_at         timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
-- Expired sessions are deleted at each login and by `wa-outbox prune`.
CREATE INDEX ops_sessions_expires_at ON wa_outbox.ops_sessions (expires_at);

-- == Attempt limits ===================================================================================================
-- Version 1 gave every row max_attempts = 10 (a NOT NULL column default; nothing could write another value), and
-- version 2 made the column an override where NULL means the workers' WA_OUTBOX_MAX_ATTEMPTS (schema.sql,
-- notifications.max_attempts), but left the rows already written at 10. Since version 2 no code writes max_attempts, so a 10 is version 1's
-- default, not a choice: hand those rows back to the policy. Every status, not only waiting rows: a sent message can
-- still turn failed (a status webhook) and a dead or failed one be requeued, and then its limit applies again.
-- Rows with any other value were set by hand and keep it.
UPDATE wa_outbox.notifications SET max_attempts = NULL WHERE max_attempts = 10;
UPDATE wa_outbox.webhook_events SET max_attempts = NULL WHERE max_attempts = 10;
