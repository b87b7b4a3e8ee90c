-- Undo version 3, in reverse order of its sections.

-- == Ops page ======================================================================================================

-- == Metrics from the workers ======================================================================================
DROP TABLE wa_outbox.worker_metrics;

-- == Campaigns: steering ===========================================================================================

-- == Per recipient: pacing, order, the service window ============================================================

-- == Pacing per sender =============================================================================================

-- == Campaigns: the shared shape ===================================================================================
DROP INDEX wa_outbox.notifications_campaign;
ALTER TABLE wa_outbox.notifications DROP COLUMN priority;
ALTER TABLE wa_outbox.notifications DROP COLUMN campaign_id;
DROP TABLE wa_outbox.campaigns;
