-- Apply the configured policy to `unknown` rows that no status webhook settled within the window:
--  * resend: back to `queued` — but only while status webhooks are arriving for that sender (in the last hour), so
--    a deployment whose webhooks are broken never double-sends on a guess; otherwise, and when attempts are
--    exhausted, `dead`;
--  * dead: `dead`, with the reason.
-- A row with a stored status event still to be processed (queued or processing) is skipped: that event will settle
-- it, and a resend would duplicate a message Meta already has. A row whose status event went `dead` is not resent on
-- a guess either: it goes `dead`, naming that event and its error. A status event is a row's by wamid, or by the
-- outbox id echoed in biz_opaque_callback_data (an unknown send usually has no wamid); both look-ups are
-- index-backed (webhook_events_wamid, webhook_events_status_outbox_id: status events not yet done).
-- Safe to repeat: guarded by status; a second run matches nothing.
WITH stale AS (
    SELECT n.id, n.phone_number_id, n.attempts,
           coalesce(n.max_attempts, %(max_attempts)s) AS max_attempts,  -- the row's own, else the retry policy's
           dead_event.id AS dead_event_id, dead_event.last_error AS dead_event_error
    FROM wa_outbox.notifications n
    LEFT JOIN LATERAL (  -- two look-ups, not one OR: each is then an index condition
        (SELECT w.id, w.last_error FROM wa_outbox.webhook_events w
         WHERE w.kind = 'status' AND w.status <> 'done' AND w.status = 'dead'
           AND wa_outbox.callback_outbox_id(w.payload #>> '{value,statuses,0,biz_opaque_callback_data}') = n.id)
        UNION ALL
        (SELECT w.id, w.last_error FROM wa_outbox.webhook_events w
         WHERE w.wamid = n.wamid AND w.kind = 'status' AND w.status = 'dead')
        ORDER BY id
        LIMIT 1
    ) dead_event ON true
    WHERE n.status = 'unknown' AND n.unknown_since < now() - make_interval(secs => %(window_seconds)s)
      AND NOT EXISTS (
          SELECT 1 FROM wa_outbox.webhook_events w
          WHERE w.kind = 'status' AND w.status <> 'done' AND w.status <> 'dead'
            AND wa_outbox.callback_outbox_id(w.payload #>> '{value,statuses,0,biz_opaque_callback_data}') = n.id)
      AND NOT EXISTS (
          SELECT 1 FROM wa_outbox.webhook_events w
          WHERE w.wamid = n.wamid AND w.kind = 'status' AND w.status IN ('queued', 'processing'))
    ORDER BY n.unknown_since
    LIMIT %(limit)s
    FOR UPDATE OF n SKIP LOCKED
), decided AS (
    SELECT s.id,
           CASE WHEN s.dead_event_id IS NULL AND %(policy)s = 'resend' AND s.attempts < s.max_attempts AND EXISTS (
                    SELECT 1 FROM wa_outbox.webhook_events w
                    WHERE w.kind = 'status' AND w.phone_number_id = s.phone_number_id
                      AND w.received_at > now() - interval '1 hour')
                THEN 'queued' ELSE 'dead' END AS next_status,
           CASE WHEN s.dead_event_id IS NOT NULL
                    THEN 'its status webhook (webhook event ' || s.dead_event_id || ') could not be processed: '
                         || coalesce(s.dead_event_error, 'no error recorded')
                WHEN %(policy)s <> 'resend' THEN 'policy is dead'
                WHEN s.attempts >= s.max_attempts THEN 'attempts exhausted'
                ELSE 'no status webhooks are arriving for this sender, so a resend could duplicate'
           END AS dead_reason,
           s.dead_event_id
    FROM stale s
), settled AS (
    UPDATE wa_outbox.notifications n
    SET status = d.next_status, next_attempt_at = now(), unknown_since = NULL, updated_at = now(),
        last_error = CASE WHEN d.next_status = 'dead'
                          THEN jsonb_strip_nulls(jsonb_build_object(
                                   'message', 'outcome unknown: no status webhook within '
                                              || %(window_seconds)s || ' s; ' || d.dead_reason,
                                   'webhook_event_id', d.dead_event_id))
                          ELSE n.last_error END
    FROM decided d
    WHERE n.id = d.id AND n.status = 'unknown'
    RETURNING n.id, n.attempts, n.correlation_id, d.next_status, d.dead_reason, d.dead_event_id
), released AS (  -- order per recipient: an unknown message that went dead lets the next one of its line go
    UPDATE wa_outbox.notifications n
    SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
    WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(SELECT id FROM settled WHERE next_status = 'dead')))
      AND n.blocked AND n.status = 'queued'
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, CASE WHEN next_status = 'queued' THEN 'requeued' ELSE 'dead' END, attempts,
           CASE WHEN next_status = 'queued'
                THEN jsonb_build_object('reason', 'no status webhook within the window: resend policy')
                ELSE jsonb_strip_nulls(jsonb_build_object('reason', 'outcome unknown: ' || dead_reason,
                                                          'webhook_event_id', dead_event_id)) END,
           correlation_id
    FROM settled
)
SELECT next_status, count(*) AS n FROM settled GROUP BY next_status
