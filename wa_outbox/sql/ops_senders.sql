-- The ops page: each sender's shared rate, the tokens its bucket holds now (refilled up to this moment, as
-- take_tokens() would), and its pause with the reason.
-- Safe to repeat: a read.
SELECT r.phone_number_id, r.mps, r.burst,
       CASE WHEN r.paused_until > now() THEN r.tokens
            ELSE least(r.burst, r.tokens + extract(epoch FROM clock_timestamp() - r.refilled_at) * r.mps)
       END AS tokens,
       r.paused_until > now() AS paused, r.paused_until, r.pause_reason, r.updated_at
FROM wa_outbox.rate_limits r
ORDER BY r.phone_number_id
