-- wa-outbox schema, version 2: hardening. One owner per rule (the retry policy's max_attempts, the words of the
-- timeline), inputs that can no longer stall or fail their neighbours, dead schema removed.

-- == The retry policy owns max_attempts ==========================================================================
-- A row's max_attempts is an override; NULL (the default now) means the workers' WA_OUTBOX_MAX_ATTEMPTS.
ALTER TABLE wa_outbox.notifications ALTER COLUMN max_attempts DROP NOT NULL, ALTER COLUMN max_attempts DROP DEFAULT;
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN max_attempts DROP NOT NULL, ALTER COLUMN max_attempts DROP DEFAULT;

-- == The timeline's words, in one place (wa_outbox/states.py: TimelineEvent) =====================================
-- NOT VALID: earlier versions could write a status word Meta invented as an event; those rows stay as history
-- (the timeline is append-only), every new row is checked.
ALTER TABLE wa_outbox.notification_events ADD CONSTRAINT notification_events_event_check CHECK (event IN
    ('queued', 'sending', 'sent', 'retry_scheduled', 'throttled', 'sender_paused', 'pair_limited', 'unknown',
     'reconciled', 'released', 'delivered', 'read', 'played', 'failed', 'unrecognized_status', 'dead', 'requeued',
     'cancelled')) NOT VALID;

-- == Dead schema ===================================================================================================
ALTER TABLE wa_outbox.contacts DROP COLUMN next_send_at;  -- never written: pacing is reactive (pair_paused_until)
-- The dead-letter queue is read newest first by id (list_dead.sql, keyset pagination); nothing read it by time.
DROP INDEX wa_outbox.notifications_dead;
CREATE INDEX notifications_dead ON wa_outbox.notifications (id) WHERE status = 'dead';

-- == Inbound events ================================================================================================

-- == Webhook receiver ==============================================================================================

-- == Message validation ============================================================================================

