-- Apply a batch of Meta status webhooks (sent / delivered / read / played / failed) to the outbox, set-based.
-- A status finds its message by wamid, or else by the outbox id echoed in biz_opaque_callback_data (a message whose
-- send answer was lost has no wamid yet). Statuses move a message forward only (status_rank), in whatever order they
-- arrive; `unknown`, re-`queued` and `dead` messages that Meta reports as sent are `reconciled`: settled, not resent.
-- A status word this version does not know (status_rank 0: `deleted`, `warning`, whatever Meta adds) moves nothing:
-- it is only written on the timeline as `unrecognized_status`, never as an event of its own name.
-- Messages still `sending` are left to their worker: their statuses are retried a moment later.
-- The inputs are already parsed and clamped (worker/_inbound.py: status_entry), so bad fields cannot fail this
-- statement; if anything else does, the worker bisects the batch to find the one event that fails.
-- Applying an event again (its worker died after this committed, before the event was marked done) changes nothing:
-- statuses only move forward, and the timeline already holds that event's entry (by webhook_event_id).
-- Returns each input event's disposition: applied, retry, or unmatched (not a message this outbox sent), and whether
-- it settled its message as sent (`reconciled`: every event of that message in the batch says so).
WITH s AS (
    SELECT * FROM jsonb_to_recordset(%(statuses)s::jsonb)
        AS s(event_id bigint, wamid text, status text, notification_id bigint, errors jsonb, ts bigint)
), matched AS (
    SELECT s.*, coalesce(by_wamid.id, by_id.id) AS nid, wa_outbox.status_rank(s.status) AS rank
    FROM s
    -- One probe of an index per status (wamid is unique, id the key; a LATERAL ... LIMIT is never made a join): as
    -- plain joins, the planner, guessing 100 rows for the JSON, hashed the whole notifications table on every
    -- batch of a small or mid-size one (still at 10,000 rows: tests/db/test_status_cost.py). The same below:
    -- `= ANY (ARRAY(...))` for the lock, OFFSET 0 (a fence the planner keeps) for the timeline's NOT EXISTS.
    LEFT JOIN LATERAL (SELECT n.id FROM wa_outbox.notifications n WHERE n.wamid = s.wamid LIMIT 1) by_wamid ON true
    LEFT JOIN LATERAL (SELECT n.id FROM wa_outbox.notifications n
                       WHERE by_wamid.id IS NULL AND n.id = s.notification_id
                         AND (n.wamid IS NULL OR n.wamid = s.wamid) LIMIT 1) by_id ON true
), locked AS (
    SELECT n.id, n.status, n.wamid, n.attempts, n.correlation_id
    FROM wa_outbox.notifications n
    WHERE n.id = ANY (ARRAY(SELECT nid FROM matched WHERE nid IS NOT NULL))
    ORDER BY n.id
    FOR UPDATE
), target AS (
    SELECT m.nid, max(m.rank) AS best_rank, min(m.wamid) AS wamid,
           (array_agg(m.errors) FILTER (WHERE m.status = 'failed'))[1] AS errors,
           to_timestamp(min(m.ts) FILTER (WHERE m.status = 'sent')) AS sent_ts,
           to_timestamp(min(m.ts) FILTER (WHERE m.status = 'delivered')) AS delivered_ts,
           to_timestamp(min(m.ts) FILTER (WHERE m.status IN ('read', 'played'))) AS read_ts
    FROM matched m JOIN locked l ON l.id = m.nid
    WHERE l.status <> 'sending' AND m.rank > 0  -- an unrecognized word moves nothing
    GROUP BY m.nid
), failure AS (  -- the fields of Meta's first error, each only when it has the expected type
    SELECT t.*,
           CASE WHEN jsonb_typeof(t.errors->0->'code') = 'number' AND t.errors->0->>'code' ~ '^-?[0-9]{1,9}$'
                THEN (t.errors->0->>'code')::integer END AS code,
           CASE WHEN jsonb_typeof(t.errors->0->'title') = 'string' THEN left(t.errors->0->>'title', 300) END AS title,
           CASE WHEN jsonb_typeof(t.errors->0->'error_data'->'details') = 'string'
                THEN left(t.errors->0->'error_data'->>'details', 500) END AS details
    FROM target t
), updated AS (
    UPDATE wa_outbox.notifications n
    SET status = CASE greatest(t.best_rank, wa_outbox.status_rank(n.status))
                     WHEN 10 THEN 'sent' WHEN 20 THEN 'delivered' WHEN 25 THEN 'failed' WHEN 30 THEN 'read'
                     ELSE n.status END,
        wamid = coalesce(n.wamid, t.wamid),
        sent_at = coalesce(n.sent_at, t.sent_ts, t.delivered_ts, t.read_ts, now()),
        delivered_at = coalesce(n.delivered_at, t.delivered_ts),
        read_at = coalesce(n.read_at, t.read_ts),
        -- Meta's first error, readable ("Meta reported the message failed: 131026 Message undeliverable") and
        -- filterable: its code at the top level, as for dead messages (dlq list --code, /v1/dead?code=).
        last_error = CASE WHEN t.errors IS NOT NULL AND t.best_rank = 25
                          THEN jsonb_strip_nulls(jsonb_build_object(
                              'message', 'Meta reported the message failed'
                                         || coalesce(': ' || nullif(concat_ws(' ', t.code, t.title), ''), '')
                                         || coalesce(' (' || t.details || ')', ''),
                              'code', t.code, 'title', t.title, 'errors', t.errors))
                          ELSE n.last_error END,
        unknown_since = NULL, updated_at = now()
    FROM failure t
    WHERE n.id = t.nid
    RETURNING n.id
), released AS (  -- order per recipient: a queued or unknown message Meta reports lets the next one of its line go
    UPDATE wa_outbox.notifications n
    SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
    WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(
              SELECT u.id FROM updated u JOIN locked l ON l.id = u.id WHERE l.status IN ('queued', 'unknown'))))
      AND n.blocked AND n.status = 'queued'
      AND n.id NOT IN (SELECT id FROM updated)
), reconciled AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT l.id, 'reconciled', l.attempts,
           jsonb_build_object('from', l.status, 'wamid', t.wamid, 'reason', 'a status webhook showed Meta accepted it'),
           l.correlation_id
    FROM locked l JOIN target t ON t.nid = l.id
    WHERE l.status IN ('unknown', 'queued', 'dead', 'cancelled')
    RETURNING notification_id
), timeline AS (  -- Meta's `sent` repeats what the send already recorded; `reconciled` covers the other case
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT l.id, CASE WHEN m.rank > 0 THEN m.status ELSE 'unrecognized_status' END, l.attempts,
           jsonb_strip_nulls(jsonb_build_object('wamid', m.wamid, 'errors', m.errors, 'webhook_event_id', m.event_id,
                                                'status', CASE WHEN m.rank = 0 THEN m.status END)),
           l.correlation_id
    FROM matched m JOIN locked l ON l.id = m.nid
    WHERE l.status <> 'sending' AND m.status <> 'sent'
      AND NOT EXISTS (  -- applied already by a worker that died before marking the event done: not twice
          SELECT 1 FROM wa_outbox.notification_events e  -- the message's own events (primary key prefix)
          WHERE e.notification_id = l.id AND e.detail->>'webhook_event_id' = m.event_id::text OFFSET 0)
    ORDER BY m.event_id  -- in the order the webhooks arrived
)
SELECT m.event_id, m.nid AS notification_id, m.status,
       CASE WHEN m.nid IS NULL THEN 'unmatched' WHEN l.status = 'sending' THEN 'retry' ELSE 'applied' END AS disposition,
       -- its message was settled as sent by this statement (a `reconciled` written): the worker counts it a send
       coalesce(m.nid IN (SELECT notification_id FROM reconciled), false) AS reconciled
FROM matched m LEFT JOIN locked l ON l.id = m.nid
