-- After a claim that could not fill a worker's free slots: how many seconds until there may be something to claim,
-- i.e. until the earliest queued message is due and its sender's next send slot comes within the claim's horizon
-- (%(horizon)s s: reserve_slots in schema.sql), or its pause ends. Claims reserve slots ahead, so coming back
-- then keeps the sender's schedule full; claims deferred the rows over the grant to exactly those times.
-- The next slot: when the bucket level (tokens + elapsed * refill) reaches one.
-- Negative or 0: at once. NULL: nothing queued (wait for NOTIFY or the poll interval).
-- Safe to repeat: a read.
SELECT extract(epoch FROM greatest(
           n.next_attempt_at,
           CASE WHEN r.paused_until > now() THEN r.paused_until END,
           r.refilled_at + make_interval(secs => greatest(0, 1 - r.tokens) / s.refill - %(horizon)s)
       ) - clock_timestamp())::double precision AS wait_seconds
-- The earliest claimable row (queued, not parked behind an earlier one of its line): the first of each priority
-- (0-9, the column's CHECK) by the claim's index, notifications_due, ten index descents at any queue size.
FROM (SELECT q.phone_number_id, q.next_attempt_at
      FROM generate_series(0, 9) AS p(priority)
      CROSS JOIN LATERAL (SELECT q.phone_number_id, q.next_attempt_at FROM wa_outbox.notifications q
                          WHERE q.status = 'queued' AND NOT q.blocked AND q.priority = p.priority
                          ORDER BY q.next_attempt_at LIMIT 1) q
      ORDER BY q.next_attempt_at LIMIT 1) n
LEFT JOIN wa_outbox.rate_limits r ON r.phone_number_id = n.phone_number_id
LEFT JOIN LATERAL wa_outbox.bucket_shape(r.mps, r.burst) s ON true
