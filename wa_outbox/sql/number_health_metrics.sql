-- For /metrics at scrape time: each registered sender's health as Meta last reported it (number_health), one row
-- per sender with a row there (restricted: wa_outbox.number_restricted(); banned: a ban state of
-- banned_states, number_health.BANNED_STATES).
-- Safe to repeat: a read.
SELECT h.phone_number_id, h.quality_rating, h.flagged,
       -- its last rating change lowered it (GREEN > YELLOW > RED; UNKNOWN is no rating)
       coalesce(array_position(ARRAY['RED', 'YELLOW', 'GREEN'], h.quality_rating)
                < array_position(ARRAY['RED', 'YELLOW', 'GREEN'], h.previous_quality_rating), false) AS quality_dropped,
       wa_outbox.number_restricted(h.restrictions, h.restricted_until) AS restricted,
       coalesce(h.ban_state = ANY(%(banned_states)s), false) AS banned,
       h.messaging_limit, h.throughput_mps
FROM wa_outbox.number_health h
ORDER BY h.phone_number_id
