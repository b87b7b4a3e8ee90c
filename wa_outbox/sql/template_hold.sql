-- Hold every queued message of the templates in %(templates)s (JSON [{waba_id, name, language, hold_reason}]) in one
-- statement: its template is paused or not approved (a status webhook, a sync, a 132015 answer). A held message stays
-- `queued` with its hold_reason, due at 'infinity' (no claim reads it), its attempts as they were: not dead, nothing
-- spent; a template_held row on its timeline. The messages are those of the business account's senders, by template
-- name and language. %(ids)s: rows `sending` under %(worker_id)s's lease that are held too (the send refused with
-- 132015: its attempt is given back). Rows of the held index are found by scanning the senders' queued rows: this runs
-- on a template's change, never per send.
-- Safe to repeat: a row already held for that reason is not held again.
WITH k AS (
    SELECT * FROM jsonb_to_recordset(%(templates)s::jsonb)
        AS k(waba_id text, name text, language text, hold_reason text)
), target AS (
    SELECT n.id, k.hold_reason, k.name, k.language, n.status = 'sending' AS refused
    FROM k
    JOIN wa_outbox.senders s ON s.waba_id = k.waba_id
    JOIN wa_outbox.notifications n ON n.phone_number_id = s.phone_number_id
    WHERE n.message -> 'template' ->> 'name' = k.name
      AND coalesce(n.message -> 'template' -> 'language' ->> 'code', n.message -> 'template' ->> 'language')
          = k.language
      AND ((n.status = 'queued' AND n.hold_reason IS DISTINCT FROM k.hold_reason)
           OR (n.status = 'sending' AND n.id = ANY (%(ids)s::bigint[]) AND n.locked_by = %(worker_id)s))
    ORDER BY n.id
    FOR UPDATE OF n
), held AS (
    UPDATE wa_outbox.notifications n
    SET status = 'queued', hold_reason = t.hold_reason, next_attempt_at = 'infinity',
        attempts = n.attempts - CASE WHEN t.refused THEN 1 ELSE 0 END,
        locked_by = NULL, locked_until = NULL, updated_at = now()
    FROM target t
    WHERE n.id = t.id
    RETURNING n.id, n.attempts, n.correlation_id, t.hold_reason, t.name, t.language
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'template_held', attempts,
           jsonb_build_object('reason', hold_reason, 'template', name, 'language', language), correlation_id
    FROM held
)
SELECT count(*)::integer AS held FROM held
