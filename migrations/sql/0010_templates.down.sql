-- Undo of 0010_templates.up.sql, in reverse order.

-- == Templates ======================================================================================================
-- Messages held by a template go back to the queue, due now (those of a paused or cancelled campaign stay parked):
-- without the templates table nothing would ever release them.
UPDATE wa_outbox.notifications n
SET hold_reason = NULL, updated_at = now(),
    next_attempt_at = CASE WHEN EXISTS (SELECT 1 FROM wa_outbox.campaigns c
                                        WHERE c.id = n.campaign_id AND c.status <> 'active')
                           THEN 'infinity'::timestamptz ELSE now() END
WHERE n.hold_reason IN ('template_paused', 'template_not_approved') AND n.status = 'queued';
DROP INDEX wa_outbox.notifications_template_held;
DROP TABLE wa_outbox.templates;
