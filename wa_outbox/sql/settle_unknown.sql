-- Apply the configured policy to `unknown` rows that no status webhook settled within the window:
--  * resend: back to `queued` — but only while status webhooks are arriving for that sender (in the last hour), so
--    a deployment whose webhooks are broken never double-sends on a guess; otherwise, and when attempts are
--    exhausted, `dead`;
--  * dead: `dead`, with the reason.
-- Safe to repeat: guarded by status; a second run matches nothing.
WITH stale AS (
    SELECT n.id, n.phone_number_id, n.attempts,
           coalesce(n.max_attempts, %(max_attempts)s) AS max_attempts  -- the row's own, else the retry policy's
    FROM wa_outbox.notifications n
    WHERE n.status = 'unknown' AND n.unknown_since < now() - make_interval(secs => %(window_seconds)s)
    ORDER BY n.unknown_since
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), decided AS (
    SELECT s.id,
           CASE WHEN %(policy)s = 'resend' AND s.attempts < s.max_attempts AND EXISTS (
                    SELECT 1 FROM wa_outbox.webhook_events w
                    WHERE w.kind = 'status' AND w.phone_number_id = s.phone_number_id
                      AND w.received_at > now() - interval '1 hour')
                THEN 'queued' ELSE 'dead' END AS next_status,
           CASE WHEN %(policy)s <> 'resend' THEN 'policy is dead'
                WHEN s.attempts >= s.max_attempts THEN 'attempts exhausted'
                ELSE 'no status webhooks are arriving for this sender, so a resend could duplicate'
           END AS dead_reason
    FROM stale s
), settled AS (
    UPDATE wa_outbox.notifications n
    SET status = d.next_status, next_attempt_at = now(), unknown_since = NULL, updated_at = now(),
        last_error = CASE WHEN d.next_status = 'dead'
                          THEN jsonb_build_object('message', 'outcome unknown: no status webhook within '
                                                  || %(window_seconds)s || ' s; ' || d.dead_reason)
                          ELSE n.last_error END
    FROM decided d
    WHERE n.id = d.id AND n.status = 'unknown'
    RETURNING n.id, n.attempts, n.correlation_id, d.next_status, d.dead_reason
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, CASE WHEN next_status = 'queued' THEN 'requeued' ELSE 'dead' END, attempts,
           CASE WHEN next_status = 'queued'
                THEN jsonb_build_object('reason', 'no status webhook within the window: resend policy')
                ELSE jsonb_build_object('reason', 'outcome unknown: ' || dead_reason) END,
           correlation_id
    FROM settled
)
SELECT next_status, count(*) AS n FROM settled GROUP BY next_status
