-- Undo version 3, in reverse order of its sections.

-- == Ops page ======================================================================================================
DROP INDEX wa_outbox.notifications_dead_code;
DROP INDEX wa_outbox.notification_events_created_at;

-- == Metrics from the workers ======================================================================================
DROP TABLE wa_outbox.worker_metrics;

-- == Campaigns: steering ===========================================================================================
DROP TRIGGER notifications_park_paused_campaign ON wa_outbox.notifications;
DROP FUNCTION wa_outbox.park_paused_campaign_message();
DROP FUNCTION wa_outbox.steer_campaign(text, text, text, text);
DROP FUNCTION wa_outbox.enqueue_campaign(text, text, jsonb, text);

-- == Per recipient: pacing, order, the service window ============================================================

-- == Pacing per sender =============================================================================================
DROP INDEX wa_outbox.notifications_dead_or_failed;
-- Version 1's take_tokens(), exactly.
-- take_tokens(): the shared token bucket. Grants up to `wanted` sends for a sender now (0 while it is paused) and
-- says when the next token will be there; creates the bucket at the default rate on first use. The row lock makes
-- concurrent workers on any number of machines share one rate.
CREATE OR REPLACE FUNCTION wa_outbox.take_tokens(sender text, wanted integer, default_mps double precision,
                                      OUT granted integer, OUT next_token_at timestamptz, OUT mps double precision)
LANGUAGE plpgsql AS $$
DECLARE
    b wa_outbox.rate_limits;
    available double precision;
    t timestamptz := clock_timestamp();
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    VALUES (sender, default_mps, greatest(1, default_mps), greatest(1, default_mps), t)
    ON CONFLICT (phone_number_id) DO NOTHING;
    SELECT * INTO b FROM wa_outbox.rate_limits r WHERE r.phone_number_id = sender FOR UPDATE;
    mps := b.mps;
    IF b.paused_until > t THEN
        granted := 0;
        next_token_at := b.paused_until;
        RETURN;
    END IF;
    available := least(b.burst, b.tokens + extract(epoch FROM t - b.refilled_at) * b.mps);
    granted := greatest(0, least(wanted, floor(available)::integer));
    UPDATE wa_outbox.rate_limits r SET tokens = available - granted, refilled_at = t
    WHERE r.phone_number_id = sender;
    next_token_at := t + make_interval(secs => greatest(0, 1 - (available - granted)) / b.mps);
END $$;
COMMENT ON COLUMN wa_outbox.rate_limits.burst IS NULL;
UPDATE wa_outbox.rate_limits SET burst = greatest(1, mps) WHERE burst IS NULL;
ALTER TABLE wa_outbox.rate_limits ALTER COLUMN burst SET NOT NULL;
DROP FUNCTION wa_outbox.bucket_shape(double precision, double precision);

-- == Campaigns: the shared shape ===================================================================================
DROP INDEX wa_outbox.notifications_campaign;
ALTER TABLE wa_outbox.notifications DROP COLUMN priority;
ALTER TABLE wa_outbox.notifications DROP COLUMN campaign_id;
DROP TABLE wa_outbox.campaigns;
