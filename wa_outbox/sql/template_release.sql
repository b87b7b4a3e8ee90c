-- Release the messages the templates in %(templates)s (JSON [{waba_id, name, language}]) held, in one statement:
-- the template is approved again (APPROVED / REINSTATED webhook, a sync). Each goes back to the queue in its order
-- (due now, a microsecond apart by id: the claim takes them by next_attempt_at), hold_reason NULL, a
-- template_released row on its timeline; a message of a paused or cancelled campaign stays parked (due at
-- 'infinity': `campaign resume` lets it go). The workers are woken at commit.
-- Safe to repeat: a released row is no longer held, a second run matches nothing.
WITH k AS (
    SELECT * FROM jsonb_to_recordset(%(templates)s::jsonb) AS k(waba_id text, name text, language text)
), target AS (
    SELECT n.id, k.name, k.language,
           EXISTS (SELECT 1 FROM wa_outbox.campaigns c WHERE c.id = n.campaign_id AND c.status <> 'active') AS parked,
           row_number() OVER (ORDER BY n.id) AS rank
    FROM k
    JOIN wa_outbox.senders s ON s.waba_id = k.waba_id
    JOIN wa_outbox.notifications n ON n.phone_number_id = s.phone_number_id
         AND n.message -> 'template' ->> 'name' = k.name  -- notifications_template_held
         AND n.hold_reason IN ('template_paused', 'template_not_approved')
    WHERE n.status = 'queued'
      AND coalesce(n.message -> 'template' -> 'language' ->> 'code', n.message -> 'template' ->> 'language')
          = k.language
), locked AS (
    SELECT n.id FROM wa_outbox.notifications n WHERE n.id IN (SELECT id FROM target) ORDER BY n.id FOR UPDATE
), released AS (
    UPDATE wa_outbox.notifications n
    SET hold_reason = NULL, updated_at = now(),
        next_attempt_at = CASE WHEN t.parked THEN 'infinity'::timestamptz
                               ELSE now() + make_interval(secs => t.rank / 1e6) END
    FROM target t
    WHERE n.id = t.id AND n.id IN (SELECT id FROM locked) AND n.status = 'queued'
      AND n.hold_reason IN ('template_paused', 'template_not_approved')
    RETURNING n.id, n.attempts, n.correlation_id, t.name, t.language, t.parked
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'template_released', attempts,
           jsonb_build_object('template', name, 'language', language) || CASE WHEN parked
               THEN '{"parked": "its campaign is not active"}'::jsonb ELSE '{}'::jsonb END,
           correlation_id
    FROM released
), woken AS (
    SELECT pg_notify('wa_outbox_notifications', '') FROM released LIMIT 1
)
SELECT count(*)::integer AS released FROM released WHERE (SELECT count(*) FROM woken) >= 0
