-- Record a batch of template changes (%(changes)s: JSON, wa_outbox/templates.py TemplateChange rows: webhooks or a
-- sync) in one statement: one upsert per template, each field the newest of the batch that carries it (several
-- changes to one template in a batch are folded in time order: an INSERT may touch a row once). A change without a
-- business account takes its webhook event's (entry[].id), and without a time its arrival. A status older than the
-- one stored (an out-of-order webhook) does not overwrite it. Returns each template touched with its status before
-- and after, and whether the batch said anything of its status (`status_news`): the caller acts on the status then
-- (templates.status_action), even when it is the same as before: a batch retried after its upsert committed but its
-- holds or releases failed still holds or releases (each is idempotent).
-- Safe to repeat: the same changes give the same row (a status is only replaced by one at least as new).
WITH c AS (
    SELECT coalesce(c.waba_id, w.account_id) AS waba_id, c.name, c.language, c.template_id, c.status, c.reason,
           c.quality, c.category, c.category_pending,
           CASE WHEN c.category_change_at IS NOT NULL THEN to_timestamp(c.category_change_at) END AS category_change_at,
           c.components,
           coalesce(CASE WHEN c.ts IS NOT NULL THEN to_timestamp(c.ts) END, w.received_at, now()) AS at,
           coalesce(c.event_id, 0) AS event_id, c.event_id IS NULL AS synced
    FROM jsonb_to_recordset(%(changes)s::jsonb)
        AS c(event_id bigint, waba_id text, name text, language text, template_id text, status text, reason text,
             quality text, category text, category_pending text, category_change_at bigint, components jsonb,
             ts bigint)
    LEFT JOIN wa_outbox.webhook_events w ON w.id = c.event_id
), folded AS (  -- per template, each field's newest value in the batch (NULL: the batch did not say)
    SELECT waba_id, name, language,
           (array_agg(template_id ORDER BY at DESC, event_id DESC) FILTER (WHERE template_id IS NOT NULL))[1]
               AS template_id,
           (array_agg(status ORDER BY at DESC, event_id DESC) FILTER (WHERE status IS NOT NULL))[1] AS status,
           (array_agg(reason ORDER BY at DESC, event_id DESC) FILTER (WHERE status IS NOT NULL))[1] AS reason,
           max(at) FILTER (WHERE status IS NOT NULL) AS status_at,
           (array_agg(quality ORDER BY at DESC, event_id DESC) FILTER (WHERE quality IS NOT NULL))[1] AS quality,
           (array_agg(category ORDER BY at DESC, event_id DESC) FILTER (WHERE category IS NOT NULL))[1] AS category,
           (array_agg(category_pending ORDER BY at DESC, event_id DESC)
               FILTER (WHERE category_pending IS NOT NULL))[1] AS category_pending,
           (array_agg(category_change_at ORDER BY at DESC, event_id DESC)
               FILTER (WHERE category_pending IS NOT NULL))[1] AS category_change_at,
           (array_agg(components ORDER BY at DESC, event_id DESC) FILTER (WHERE components IS NOT NULL))[1]
               AS components,
           bool_or(synced) AS synced,
           bool_or(status IS NOT NULL) AS status_news
    FROM c
    WHERE waba_id ~ '^[0-9]{1,32}$' AND length(name) BETWEEN 1 AND 512 AND length(language) BETWEEN 1 AND 32
    GROUP BY waba_id, name, language
), before AS (
    SELECT t.waba_id, t.name, t.language, t.status FROM wa_outbox.templates t
    JOIN folded f USING (waba_id, name, language)
), written AS (
    INSERT INTO wa_outbox.templates AS t (waba_id, name, language, template_id, status, reason, status_at, quality,
                                          category, category_pending, category_change_at, components, synced_at)
    SELECT waba_id, name, language, template_id, left(status, 64), left(reason, 2000), status_at, left(quality, 64),
           left(category, 64), left(category_pending, 64), category_change_at, components,
           CASE WHEN synced THEN now() END
    FROM folded
    ORDER BY waba_id, name, language  -- lock order: two batches never deadlock
    ON CONFLICT (waba_id, name, language) DO UPDATE
    SET template_id = coalesce(excluded.template_id, t.template_id),
        status = CASE WHEN excluded.status IS NOT NULL
                           AND (t.status_at IS NULL OR excluded.status_at >= t.status_at)
                      THEN excluded.status ELSE t.status END,
        reason = CASE WHEN excluded.status IS NOT NULL
                           AND (t.status_at IS NULL OR excluded.status_at >= t.status_at)
                      THEN excluded.reason ELSE t.reason END,
        status_at = CASE WHEN excluded.status IS NOT NULL
                              AND (t.status_at IS NULL OR excluded.status_at >= t.status_at)
                         THEN excluded.status_at ELSE t.status_at END,
        quality = coalesce(excluded.quality, t.quality),
        category = coalesce(excluded.category, t.category),
        -- an announced change stays announced until the template has the category announced (a status webhook
        -- carries the current category, which does not end it)
        category_pending = CASE WHEN excluded.category_pending IS NOT NULL THEN excluded.category_pending
                                WHEN excluded.category IS NOT DISTINCT FROM t.category_pending THEN NULL
                                ELSE t.category_pending END,
        category_change_at = CASE WHEN excluded.category_pending IS NOT NULL THEN excluded.category_change_at
                                  WHEN excluded.category IS NOT DISTINCT FROM t.category_pending THEN NULL
                                  ELSE t.category_change_at END,
        components = coalesce(excluded.components, t.components),
        synced_at = coalesce(excluded.synced_at, t.synced_at),
        updated_at = now()
    RETURNING t.waba_id, t.name, t.language, t.status
)
SELECT w.waba_id, w.name, w.language, b.status AS previous_status, w.status, f.status_news
FROM written w LEFT JOIN before b USING (waba_id, name, language) JOIN folded f USING (waba_id, name, language)
ORDER BY w.waba_id, w.name, w.language
