-- The templates wa-outbox knows (`templates list|show`, GET /v1/templates, /ops), filtered by business account,
-- status (Meta's word, any case), name and language (each NULL: any), with the messages each holds now. The held
-- count reads notifications_template_held: only held rows. Ordered by business account, name, language.
SELECT t.waba_id, t.name, t.language, t.template_id, t.status, t.quality, t.category, t.reason,
       t.category_pending, t.category_change_at, t.status_at, t.synced_at, t.created_at, t.updated_at,
       t.components,
       (SELECT count(*) FROM wa_outbox.senders s
        JOIN wa_outbox.notifications n ON n.phone_number_id = s.phone_number_id
             AND n.message -> 'template' ->> 'name' = t.name
             AND n.hold_reason IN ('template_paused', 'template_not_approved')
        WHERE s.waba_id = t.waba_id AND n.status = 'queued'
          AND coalesce(n.message -> 'template' -> 'language' ->> 'code', n.message -> 'template' ->> 'language')
              = t.language)::integer AS held
FROM wa_outbox.templates t
WHERE (%(waba_id)s::text IS NULL OR t.waba_id = %(waba_id)s)
  AND (%(status)s::text IS NULL OR upper(t.status) = upper(%(status)s))
  AND (%(name)s::text IS NULL OR t.name = %(name)s)
  AND (%(language)s::text IS NULL OR t.language = %(language)s)
ORDER BY t.waba_id, t.name, t.language
LIMIT %(limit)s
