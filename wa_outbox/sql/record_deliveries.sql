-- Record a batch of delivery attempts (%(outcomes)s: a JSON array of {id, endpoint_id, attempt, status, next_in,
-- status_code, latency_ms, response_head, error}) in one statement: every attempt into delivery_attempts, each
-- delivery's new state (delivered, queued again after next_in seconds, or failed), and each endpoint's
-- failing_since (cleared by a success in the batch, else set at its first failure); on ordered endpoints, the next
-- delivery of each conversation whose delivery ended is woken (dispatch_events.sql). Only rows this worker still
-- holds under the lease of that attempt move; the attempt is recorded either way (it happened).
-- Returns the endpoints that failed in this batch with their failing_since, for the N-days rule (delivery_policy.py).
-- Safe to repeat: each attempt is keyed (delivery, attempt), each row moves only from `delivering` under our lease.
WITH outcome AS (
    SELECT * FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS o(
        id bigint, endpoint_id text, attempt int, status text, next_in double precision, status_code int,
        latency_ms double precision, response_head text, error text)
), attempt AS (
    INSERT INTO wa_outbox.delivery_attempts (delivery_id, attempt, endpoint_id, status_code, latency_ms,
                                            response_head, error)
    SELECT o.id, o.attempt, o.endpoint_id, o.status_code, o.latency_ms, o.response_head, o.error
    FROM outcome o
    -- the delivery still exists (not removed with its endpoint meanwhile): one probe of its primary key per outcome.
    -- A LATERAL ... LIMIT is never made a join; as an EXISTS, the planner, guessing 100 rows for the JSON, hashed
    -- the whole deliveries table on every batch (bench/deliveries.py, bench/capacity.py).
    CROSS JOIN LATERAL (SELECT 1 FROM wa_outbox.deliveries d WHERE d.id = o.id LIMIT 1) still
    ON CONFLICT (delivery_id, attempt) DO NOTHING
), moved AS (
    UPDATE wa_outbox.deliveries d
    SET status = o.status, locked_by = NULL, locked_until = NULL, updated_at = now(),
        next_attempt_at = CASE WHEN o.status = 'queued' THEN now() + make_interval(secs => o.next_in)
                               ELSE d.next_attempt_at END,
        last_status_code = o.status_code, last_error = o.error,
        delivered_at = CASE WHEN o.status = 'delivered' THEN now() END
    FROM outcome o
    -- By primary key, one probe per outcome, whatever the planner guesses: joined on id alone, it guessed 100 rows
    -- for the JSON and hashed the whole table; with `d.status = 'delivering'` it walked deliveries_leased, every
    -- worker's leases and (until a vacuum) the entries of rows long delivered: 10,000 rows or 1,000 entries read for
    -- 20 outcomes (bench/deliveries.py). The status test is implied: only a claim sets locked_by (and counts the
    -- attempt), and every way out of `delivering` (a record, the rescuer, a replay) clears it.
    WHERE d.id = ANY (ARRAY(SELECT id FROM outcome)) AND d.id = o.id
      AND d.locked_by = %(worker_id)s AND d.attempts = o.attempt
    RETURNING d.id, d.endpoint_id, d.phone_number_id, d.wa_id, d.status
), woken AS (  -- ordered: a delivery that ended wakes the next one of its conversation, held since its dispatch
    -- (only ordered endpoints hold deliveries, and an endpoint's `ordered` never changes: the others' are not looked
    -- for, a probe of deliveries_conversation per delivery saved)
    UPDATE wa_outbox.deliveries n SET next_attempt_at = now(), updated_at = now()
    FROM (SELECT (SELECT min(x.id) FROM wa_outbox.deliveries x
                  WHERE x.endpoint_id = m.endpoint_id AND x.phone_number_id = m.phone_number_id
                    AND x.wa_id = m.wa_id AND x.status = 'queued' AND x.id > m.id) AS id
          FROM moved m JOIN wa_outbox.endpoints e ON e.id = m.endpoint_id AND e.ordered
          WHERE m.status IN ('delivered', 'failed')) next
    WHERE n.id = next.id AND n.status = 'queued' AND n.next_attempt_at = 'infinity'
), per_endpoint AS (
    SELECT endpoint_id, bool_or(status = 'delivered') AS succeeded FROM outcome GROUP BY endpoint_id
), changing AS (  -- locked in id order: two workers' batches touching the same endpoints never deadlock
    SELECT en.id, p.succeeded FROM wa_outbox.endpoints en JOIN per_endpoint p ON p.endpoint_id = en.id
    WHERE (p.succeeded AND en.failing_since IS NOT NULL) OR (NOT p.succeeded AND en.failing_since IS NULL)
    ORDER BY en.id
    FOR NO KEY UPDATE OF en
), health AS (
    UPDATE wa_outbox.endpoints en
    SET failing_since = CASE WHEN c.succeeded THEN NULL ELSE coalesce(en.failing_since, now()) END
    FROM changing c
    WHERE en.id = c.id
    RETURNING en.id
)  -- (data-modifying CTEs run whole whether read or not)
-- failing_since as it was before this batch (NULL: it starts failing now, so not for N days yet)
SELECT en.id AS endpoint_id, en.failing_since, now() AS now
FROM wa_outbox.endpoints en JOIN per_endpoint p ON p.endpoint_id = en.id
WHERE NOT p.succeeded AND en.state = 'enabled'
