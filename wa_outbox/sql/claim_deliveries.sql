-- Claim up to %(limit)s due deliveries for this worker's delivery threads, under a lease (as sends are claimed).
-- Fair across endpoints: each enabled endpoint offers its earliest due deliveries, at most %(per_endpoint)s minus
-- what this worker already has in flight to it (%(held)s: {"endpoint id": count}), and the claim takes the first of
-- every endpoint, then the second of every endpoint, ...: a slow or dead endpoint holds a few threads, never all.
-- Ordered endpoints: only the earliest undelivered delivery of a conversation (phone_number_id, wa_id) is claimable
-- (earlier: a smaller id, which is the feed's order), so one conversation's events go one at a time, in order, and a
-- delivery waiting for its retry holds its own conversation only. A `failed` one holds nothing: its conversation
-- moves on, and it stays replayable. Events without a conversation are not ordered. The attempt is counted here:
-- a delivery that kills its worker every time still runs out of attempts (rescue_deliveries.sql).
WITH held AS (
    SELECT key AS endpoint_id, value::int AS n FROM jsonb_each_text(%(held)s::jsonb)
), offered AS (
    SELECT d.id, d.endpoint_id, d.event_seq, d.next_attempt_at,
           row_number() OVER (PARTITION BY d.endpoint_id ORDER BY d.next_attempt_at, d.id) AS turn
    FROM wa_outbox.endpoints e
    LEFT JOIN held h ON h.endpoint_id = e.id
    CROSS JOIN LATERAL (
        SELECT d.id, d.endpoint_id, d.event_seq, d.next_attempt_at FROM wa_outbox.deliveries d
        WHERE d.endpoint_id = e.id AND d.status = 'queued' AND d.next_attempt_at <= now()
          AND (NOT e.ordered OR d.phone_number_id IS NULL OR d.wa_id IS NULL OR NOT EXISTS (
                SELECT 1 FROM wa_outbox.deliveries p
                WHERE p.endpoint_id = d.endpoint_id AND p.phone_number_id = d.phone_number_id
                  AND p.wa_id = d.wa_id AND p.id < d.id AND p.status IN ('queued', 'delivering')))
        ORDER BY d.next_attempt_at, d.id
        LIMIT greatest(0, least(%(limit)s, %(per_endpoint)s - coalesce(h.n, 0)))
        FOR UPDATE SKIP LOCKED
    ) d
    WHERE e.state = 'enabled'
), chosen AS (
    SELECT id, endpoint_id, event_seq FROM offered ORDER BY turn, next_attempt_at, id LIMIT %(limit)s
)
UPDATE wa_outbox.deliveries d
SET status = 'delivering', attempts = d.attempts + 1, locked_by = %(worker_id)s,
    locked_until = now() + make_interval(secs => %(lease_seconds)s), updated_at = now()
FROM chosen c
JOIN wa_outbox.endpoints en ON en.id = c.endpoint_id
JOIN wa_outbox.events ev ON ev.seq = c.event_seq
WHERE d.id = c.id
RETURNING d.id, d.endpoint_id, d.event_seq, d.attempts, en.url, en.secret_enc, en.previous_secret_enc,
          coalesce(en.previous_secret_until > now(), false) AS previous_signs, ev.type, ev.occurred_at, ev.data
