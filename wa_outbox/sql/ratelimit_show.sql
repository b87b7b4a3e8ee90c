-- The shared per-sender rates and pauses, for `wa-outbox ratelimit show`: the configured rate (mps), the burst as
-- set (NULL: the default pacing), the bucket it makes (refill rate, capacity: bucket_shape in schema.sql) and
-- the tokens in it now (as ops_senders.sql counts them: 0 while send slots are reserved ahead).
-- Safe to repeat: a read.
SELECT r.phone_number_id, r.mps, r.burst, s.refill, s.capacity,
       round(greatest(0, CASE WHEN r.paused_until > now() THEN r.tokens
                              ELSE least(s.capacity,
                                         r.tokens + extract(epoch FROM clock_timestamp() - r.refilled_at) * s.refill)
                         END)::numeric, 2) AS tokens,
       CASE WHEN r.paused_until > now() THEN r.paused_until END AS paused_until,
       CASE WHEN r.paused_until > now() THEN r.pause_reason END AS pause_reason, r.updated_at
FROM wa_outbox.rate_limits r, LATERAL wa_outbox.bucket_shape(r.mps, r.burst) s
ORDER BY r.phone_number_id
