-- Undo of 0008_accounts.up.sql, in reverse order.
-- Version 0007's reserve_slots() (0005_speed's), exactly; then the set-based one goes.
CREATE OR REPLACE FUNCTION wa_outbox.reserve_slots(sender text, wanted integer, default_mps double precision,
                                        lead double precision, horizon double precision,
                                        OUT granted integer, OUT slots_from timestamptz, OUT level double precision,
                                        OUT refill double precision, OUT paused boolean)
LANGUAGE plpgsql AS $$
DECLARE
    b wa_outbox.rate_limits;
    shape record;
    t timestamptz;
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    VALUES (sender, default_mps, NULL, (wa_outbox.bucket_shape(default_mps, NULL)).capacity, clock_timestamp())
    ON CONFLICT (phone_number_id) DO NOTHING;
    SELECT * INTO b FROM wa_outbox.rate_limits r WHERE r.phone_number_id = sender FOR UPDATE;
    shape := wa_outbox.bucket_shape(b.mps, b.burst);
    t := clock_timestamp() + make_interval(secs => least(lead, 1 / shape.refill));  -- the earliest slot
    refill := shape.refill;
    IF b.paused_until > t THEN
        granted := 0;
        slots_from := b.paused_until;
        level := shape.capacity;  -- the bucket refills during the pause
        paused := true;
        RETURN;
    END IF;
    paused := false;
    slots_from := t;
    level := least(shape.capacity, b.tokens + extract(epoch FROM t - b.refilled_at) * shape.refill);
    -- slot k is within the horizon while (k - level) / refill <= horizon (+ 1e-9: float rounding)
    granted := greatest(0, least(wanted, floor(level + horizon * shape.refill + 1e-9)::integer));
    IF granted > 0 THEN  -- an empty grant leaves the schedule as it was (see reserve_slots_ahead)
        UPDATE wa_outbox.rate_limits r SET tokens = level - granted, refilled_at = t WHERE r.phone_number_id = sender;
    END IF;
END $$;
DROP FUNCTION wa_outbox.reserve_slots_set(text[], integer[], double precision, double precision, double precision);
DROP INDEX wa_outbox.notifications_sender_due;
ALTER TABLE wa_outbox.webhook_events DROP COLUMN app_id;
DROP TABLE wa_outbox.senders;
DROP TABLE wa_outbox.business_accounts;
DROP TABLE wa_outbox.app_secrets;
DROP TABLE wa_outbox.meta_apps;
