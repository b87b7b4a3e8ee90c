-- Undo version 2, in reverse order of its sections.

-- == Message validation ============================================================================================

-- == Webhook receiver ==============================================================================================
DROP TRIGGER webhook_events_drop_unreferenced_bodies ON wa_outbox.webhook_events;
DROP FUNCTION wa_outbox.drop_unreferenced_webhook_bodies();
DROP INDEX wa_outbox.webhook_events_raw_body;
ALTER TABLE wa_outbox.webhook_events DROP COLUMN raw_body_sha256;
DROP TABLE wa_outbox.webhook_bodies;

-- == Inbound events ================================================================================================

-- == Dead schema ===================================================================================================
DROP INDEX wa_outbox.notifications_dead;
CREATE INDEX notifications_dead ON wa_outbox.notifications (updated_at) WHERE status = 'dead';
ALTER TABLE wa_outbox.contacts ADD COLUMN next_send_at timestamptz;

-- == The timeline's words ==========================================================================================
ALTER TABLE wa_outbox.notification_events DROP CONSTRAINT notification_events_event_check;

-- == The retry policy owns max_attempts ==========================================================================
UPDATE wa_outbox.webhook_events SET max_attempts = 10 WHERE max_attempts IS NULL;
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN max_attempts SET DEFAULT 10, ALTER COLUMN max_attempts SET NOT NULL;
UPDATE wa_outbox.notifications SET max_attempts = 10 WHERE max_attempts IS NULL;
ALTER TABLE wa_outbox.notifications ALTER COLUMN max_attempts SET DEFAULT 10, ALTER COLUMN max_attempts SET NOT NULL;
