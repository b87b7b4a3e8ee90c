-- After a claim that could not fill a worker's free slots: how many seconds until there may be something to claim,
-- i.e. until the earliest queued message is due and its sender's bucket holds a whole token (or its pause ends).
-- The bucket's burst is a small fraction of a second (take_tokens, migration 0003), so a worker that slept a whole
-- poll interval would leave tokens unused; claims deferred the rows over the grant to exactly the next token times.
-- Negative or 0: at once. NULL: nothing queued (wait for NOTIFY or the poll interval).
-- Safe to repeat: a read.
SELECT extract(epoch FROM greatest(
           n.next_attempt_at,
           CASE WHEN r.paused_until > now() THEN r.paused_until END,
           r.refilled_at + make_interval(secs => greatest(0, 1 - r.tokens) / s.refill)
       ) - clock_timestamp())::double precision AS wait_seconds
FROM (SELECT q.phone_number_id, q.next_attempt_at FROM wa_outbox.notifications q
      WHERE q.status = 'queued' ORDER BY q.next_attempt_at LIMIT 1) n
LEFT JOIN wa_outbox.rate_limits r ON r.phone_number_id = n.phone_number_id
LEFT JOIN LATERAL wa_outbox.bucket_shape(r.mps, r.burst) s ON true
