-- The ops page: each sender's shared rate, the bucket it makes (bucket_shape: refill rate and capacity; burst NULL
-- is the default pacing), the tokens it holds now (refilled up to this moment, as reserve_slots() would; 0 while
-- claims have reserved send slots ahead, which takes tokens before their time), and its pause with the reason.
-- Safe to repeat: a read.
SELECT r.phone_number_id, r.mps, r.burst, s.refill, s.capacity,
       greatest(0, CASE WHEN r.paused_until > now() THEN r.tokens
                        ELSE least(s.capacity,
                                   r.tokens + extract(epoch FROM clock_timestamp() - r.refilled_at) * s.refill)
                   END) AS tokens,
       r.paused_until > now() AS paused, r.paused_until, r.pause_reason, r.updated_at
FROM wa_outbox.rate_limits r, LATERAL wa_outbox.bucket_shape(r.mps, r.burst) s
ORDER BY r.phone_number_id
