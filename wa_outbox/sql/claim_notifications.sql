-- Claim up to %(limit)s due messages for one worker, in one statement:
--  * take due queued rows in order, skipping rows other workers hold (the partial index keeps this O(batch));
--  * ask each sender's shared token bucket how many it may send now (0 while the sender is paused);
--  * rows over the grant, or to a recipient paused by the pair rate limit (131056), are pushed to the time they
--    may go, without burning an attempt, so they do not block the head of the queue;
--  * the rest become `sending` with this worker's lease, one attempt counted and a `sending` timeline event.
WITH candidates AS (
    SELECT n.id, n.phone_number_id, n.recipient, n.next_attempt_at
    FROM wa_outbox.notifications n
    WHERE n.status = 'queued' AND n.next_attempt_at <= now()
    ORDER BY n.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), grants AS (
    SELECT s.phone_number_id, g.granted, g.next_token_at, g.mps
    FROM (SELECT phone_number_id, count(*)::integer AS wanted FROM candidates GROUP BY phone_number_id) s,
         LATERAL wa_outbox.take_tokens(s.phone_number_id, s.wanted, %(default_mps)s) g
), ranked AS (
    SELECT c.id, g.granted, g.next_token_at, g.mps, ct.pair_paused_until,
           row_number() OVER (PARTITION BY c.phone_number_id ORDER BY c.next_attempt_at, c.id) AS rn
    FROM candidates c
    JOIN grants g USING (phone_number_id)
    LEFT JOIN wa_outbox.contacts ct ON ct.phone_number_id = c.phone_number_id AND ct.wa_id = c.recipient
), deferred AS (
    UPDATE wa_outbox.notifications n
    SET next_attempt_at = CASE
            WHEN r.pair_paused_until > now() THEN r.pair_paused_until
            ELSE r.next_token_at + make_interval(secs => greatest(0, r.rn - r.granted - 1) / r.mps)
        END
    FROM ranked r
    WHERE n.id = r.id AND (r.rn > r.granted OR r.pair_paused_until > now())
), claimed AS (
    UPDATE wa_outbox.notifications n
    SET status = 'sending', attempts = n.attempts + 1, locked_by = %(worker_id)s,
        locked_until = now() + make_interval(secs => %(lease_seconds)s), updated_at = now()
    FROM ranked r
    WHERE n.id = r.id AND r.rn <= r.granted AND NOT coalesce(r.pair_paused_until > now(), false)
    RETURNING n.id, n.phone_number_id, n.recipient, n.message, n.attempts, n.max_attempts, n.correlation_id
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'sending', attempts, jsonb_build_object('worker', %(worker_id)s::text), correlation_id FROM claimed
)
SELECT id, phone_number_id, recipient, message, attempts, max_attempts, correlation_id FROM claimed
