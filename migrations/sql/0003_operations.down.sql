-- Undo version 3, in reverse order of its sections.

-- == Ops page ======================================================================================================
DROP INDEX wa_outbox.notifications_dead_code;
DROP INDEX wa_outbox.notification_events_created_at;

-- == Metrics from the workers ======================================================================================

-- == Campaigns: steering ===========================================================================================
DROP TRIGGER notifications_park_paused_campaign ON wa_outbox.notifications;
DROP FUNCTION wa_outbox.park_paused_campaign_message();
DROP FUNCTION wa_outbox.steer_campaign(text, text, text, text);
DROP FUNCTION wa_outbox.enqueue_campaign(text, text, jsonb, text);

-- == Per recipient: pacing, order, the service window ============================================================

-- == Pacing per sender =============================================================================================

-- == Campaigns: the shared shape ===================================================================================
DROP INDEX wa_outbox.notifications_campaign;
ALTER TABLE wa_outbox.notifications DROP COLUMN priority;
ALTER TABLE wa_outbox.notifications DROP COLUMN campaign_id;
DROP TABLE wa_outbox.campaigns;
