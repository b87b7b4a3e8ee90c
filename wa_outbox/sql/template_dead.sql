-- Dead-letter every queued message of the templates in %(templates)s (JSON [{waba_id, name, language}]) in one
-- statement, held or not: the template is disabled (a DISABLED webhook, a sync, a 132016 answer) and will not come
-- back. Reason `template_disabled` (last_error.reason and the timeline's `dead` row), hold_reason NULL; the next
-- message of each recipient's line goes. %(ids)s: rows `sending` under %(worker_id)s's lease that die too (the
-- send refused with 132016). Returns the active campaigns those messages belong to, with how many died of each
-- (campaign NULL: messages of no campaign): the caller pauses them (steer_campaign).
-- Safe to repeat: a dead row is not queued, a second run matches nothing.
WITH k AS (
    SELECT * FROM jsonb_to_recordset(%(templates)s::jsonb) AS k(waba_id text, name text, language text)
), target AS (
    SELECT n.id, k.name, k.language
    FROM k
    JOIN wa_outbox.senders s ON s.waba_id = k.waba_id
    JOIN wa_outbox.notifications n ON n.phone_number_id = s.phone_number_id
    WHERE n.message -> 'template' ->> 'name' = k.name
      AND coalesce(n.message -> 'template' -> 'language' ->> 'code', n.message -> 'template' ->> 'language')
          = k.language
      AND (n.status = 'queued'
           OR (n.status = 'sending' AND n.id = ANY (%(ids)s::bigint[]) AND n.locked_by = %(worker_id)s))
    ORDER BY n.id
    FOR UPDATE OF n
), died AS (
    UPDATE wa_outbox.notifications n
    SET status = 'dead', hold_reason = NULL, blocked = false, locked_by = NULL, locked_until = NULL,
        updated_at = now(),
        last_error = jsonb_build_object(
            'message', 'template ' || t.name || ' (' || t.language || ') is disabled: Meta will not send it again '
                       '(132016); send another template',
            'reason', 'template_disabled', 'code', 132016)
    FROM target t
    WHERE n.id = t.id
    RETURNING n.id, n.attempts, n.correlation_id, n.campaign_id, t.name, t.language
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'dead', attempts,
           jsonb_build_object('reason', 'template_disabled', 'template', name, 'language', language), correlation_id
    FROM died
), released AS (  -- order per recipient: the next message of each line goes
    UPDATE wa_outbox.notifications n
    SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
    WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(SELECT id FROM died))) AND n.blocked AND n.status = 'queued'
      AND n.id NOT IN (SELECT id FROM died)
    RETURNING n.id
), woken AS (
    SELECT pg_notify('wa_outbox_notifications', '') FROM released LIMIT 1
)
SELECT c.name AS campaign, count(*)::integer AS dead
FROM died d LEFT JOIN wa_outbox.campaigns c ON c.id = d.campaign_id AND c.status = 'active'
WHERE (SELECT count(*) FROM woken) >= 0
GROUP BY c.name
