-- The shared per-sender rates and pauses, for `wa-outbox ratelimit show`.
-- Safe to repeat: a read.
SELECT phone_number_id, mps, burst, round(tokens::numeric, 1) AS tokens, paused_until, pause_reason, updated_at
FROM wa_outbox.rate_limits ORDER BY phone_number_id
