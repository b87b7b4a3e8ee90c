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
-- The exact bytes of webhook POSTs whose JSON had to be sanitized to fit jsonb (NUL, lone surrogates, numbers beyond
-- range) or could not be split into events at all: once per body, however many of its events refer to it. Clean
-- POSTs store none. Written in the same statement as the events that refer to them (no foreign key: its check would
-- run for every row of the hot INSERT).
CREATE TABLE wa_outbox.webhook_bodies (
    sha256       bytea PRIMARY KEY,
    body         bytea NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE wa_outbox.webhook_events ADD COLUMN raw_body_sha256 bytea;  -- NULL (no bytes) for clean events
CREATE INDEX webhook_events_raw_body ON wa_outbox.webhook_events (raw_body_sha256) WHERE raw_body_sha256 IS NOT NULL;
-- A body goes with the last event that refers to it (prune, or an operator deleting dead events). Bodies are rare
-- (poison only), so one anti-join per DELETE statement is cheap; inserts and updates never fire it.
CREATE FUNCTION wa_outbox.drop_unreferenced_webhook_bodies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM wa_outbox.webhook_bodies b
    WHERE NOT EXISTS (SELECT 1 FROM wa_outbox.webhook_events e WHERE e.raw_body_sha256 = b.sha256);
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_events_drop_unreferenced_bodies AFTER DELETE ON wa_outbox.webhook_events
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.drop_unreferenced_webhook_bodies();

-- == Message validation ============================================================================================

