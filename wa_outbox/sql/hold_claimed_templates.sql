-- Right after a claim, for the template messages it took (%(ids)s, `sending` under %(worker_id)s's lease), in one
-- statement: those whose template is known (by the sender's business account, name and language) to be paused or not
-- approved (%(paused_words)s, %(not_approved_words)s: wa_outbox/templates.py) are held (queued, hold_reason, due at
-- 'infinity', the attempt given back, a template_held row); those whose template is disabled (%(disabled_words)s)
-- die with reason template_disabled. Returns the ids taken back, with what became of each. One probe of the
-- templates primary key per row; a template never heard of has no row and its message goes as before.
-- Safe to repeat: guarded by status and lease owner; a second run matches nothing.
WITH c AS (  -- primary-key look-ups of the claimed rows, whatever the statistics say (as record_outcomes.sql)
    SELECT n.id, t.name, t.language,
           CASE WHEN t.status = ANY (%(paused_words)s::text[]) THEN 'template_paused'
                WHEN t.status = ANY (%(not_approved_words)s::text[]) THEN 'template_not_approved'
                WHEN t.status = ANY (%(disabled_words)s::text[]) THEN 'dead' END AS action
    FROM wa_outbox.notifications n
    JOIN wa_outbox.senders s ON s.phone_number_id = n.phone_number_id
    CROSS JOIN LATERAL (
        SELECT t.name, t.language, t.status FROM wa_outbox.templates t
        WHERE t.waba_id = s.waba_id AND t.name = n.message -> 'template' ->> 'name'
          AND t.language = coalesce(n.message -> 'template' -> 'language' ->> 'code',
                                    n.message -> 'template' ->> 'language')
        LIMIT 1) t
    WHERE n.id = ANY (ARRAY(SELECT unnest(%(ids)s::bigint[]))) AND n.status = 'sending'
      AND n.locked_by = %(worker_id)s
    OFFSET 0  -- computed once, on its own
), moved AS (
    UPDATE wa_outbox.notifications n
    SET status = CASE WHEN c.action = 'dead' THEN 'dead' ELSE 'queued' END,
        hold_reason = CASE WHEN c.action = 'dead' THEN NULL ELSE c.action END,
        next_attempt_at = CASE WHEN c.action = 'dead' THEN n.next_attempt_at ELSE 'infinity' END,
        attempts = n.attempts - CASE WHEN c.action = 'dead' THEN 0 ELSE 1 END,
        last_error = CASE WHEN c.action = 'dead' THEN jsonb_build_object(
            'message', 'template ' || c.name || ' (' || c.language || ') is disabled: Meta will not send it again '
                       '(132016); send another template',
            'reason', 'template_disabled', 'code', 132016) ELSE n.last_error END,
        locked_by = NULL, locked_until = NULL, updated_at = now()
    FROM c
    WHERE n.id = ANY (ARRAY(SELECT c.id FROM c WHERE c.action IS NOT NULL)) AND n.id = c.id
      AND c.action IS NOT NULL AND n.status = 'sending' AND n.locked_by = %(worker_id)s
    RETURNING n.id, n.attempts, n.correlation_id, c.action, c.name, c.language
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, CASE WHEN action = 'dead' THEN 'dead' ELSE 'template_held' END, attempts,
           jsonb_build_object('reason', CASE WHEN action = 'dead' THEN 'template_disabled' ELSE action END,
                              'template', name, 'language', language),
           correlation_id
    FROM moved
), released AS (  -- a message that died here lets the next one of its line go
    UPDATE wa_outbox.notifications n
    SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
    WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(SELECT id FROM moved WHERE action = 'dead')))
      AND n.blocked AND n.status = 'queued'
)
SELECT id, action FROM moved
