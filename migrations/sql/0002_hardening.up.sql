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
-- A status webhook finds its message by wamid or by the outbox id echoed in biz_opaque_callback_data, written as
-- "<outbox id>" or "<outbox id>:<the app's own value>": the leading digits before an optional ':' (the same rule as
-- outbox_id_from_callback in wa_outbox/worker/_inbound.py; at most 18 digits, so it always fits a bigint).
CREATE FUNCTION wa_outbox.callback_outbox_id(callback text) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(callback FROM '^([0-9]{1,18})(?::|$)')::bigint
$$;
-- settle_unknown.sql must not resend an `unknown` message while a stored status event for it is still to be
-- processed (it will settle it), and must not blindly resend one whose status event went dead. Such a message
-- usually has no wamid (its send answer was lost), so its status events are found by the echoed outbox id. Partial:
-- only status events not yet done, a handful at any time.
CREATE INDEX webhook_events_status_outbox_id ON wa_outbox.webhook_events
    (wa_outbox.callback_outbox_id(payload #>> '{value,statuses,0,biz_opaque_callback_data}'))
    WHERE kind = 'status' AND status <> 'done';

-- == Webhook receiver ==============================================================================================

-- == Message validation ============================================================================================

