-- Undo of 0009_portfolio_limits.up.sql, in reverse order.

-- == Portfolio limits ===============================================================================================
DROP FUNCTION wa_outbox.next_unit_frees(timestamptz, timestamptz);
DROP FUNCTION wa_outbox.counts_against_limit(boolean, timestamptz, timestamptz, timestamptz);
DROP INDEX wa_outbox.notifications_limit_held;
DROP TABLE wa_outbox.portfolio_units;
DROP TABLE wa_outbox.portfolios;

-- == Messages: the outbox ===========================================================================================
-- Held messages go back to the queue as they are (their next_attempt_at stands); the timeline's words of a hold go.
DELETE FROM wa_outbox.notification_events WHERE event IN ('limit_held', 'template_held', 'template_released');
ALTER TABLE wa_outbox.notification_events DROP CONSTRAINT notification_events_event_check;
ALTER TABLE wa_outbox.notification_events ADD CONSTRAINT notification_events_event_check CHECK (event IN
    ('queued', 'sending', 'sent', 'retry_scheduled', 'throttled', 'sender_paused', 'pair_limited', 'unknown',
     'reconciled', 'released', 'delivered', 'read', 'played', 'failed', 'unrecognized_status', 'dead', 'requeued',
     'cancelled')) NOT VALID;
ALTER TABLE wa_outbox.notifications DROP COLUMN hold_reason;
