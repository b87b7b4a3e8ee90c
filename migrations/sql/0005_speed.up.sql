-- Version 5: speed. One section per concern; each section's undo is in 0005_speed.down.sql, in reverse order.

-- == History flatness =================================================================================================

-- == Ops queries ======================================================================================================

-- == Claim and record =================================================================================================

-- Slots reserved ahead, in a transaction of their own. reserve_slots() in the claim held the sender's rate_limits row
-- lock through the rest of the claim and its commit's WAL flush, so the claims of every worker for one sender ran one
-- at a time (docs/drain-profile.md). A worker now reserves the slots of the senders it claimed for last time just
-- before its claim (reserve_slots_ahead.sql, a short statement committed at once) and hands the grant to the claim,
-- which then takes no lock on rate_limits for them. Slots reserved but not used (the claim found fewer rows) are lost
-- capacity, never a rate violation; they come back (`unused`) only while they are still the end of the sender's
-- schedule, i.e. no one reserved a slot since (`reserved_at`, the refilled_at this worker's reservation left): then the
-- schedule is exactly as if they had never been reserved.

-- reserve_slots() as in version 4, except that a reservation granting nothing writes nothing: the state it wrote
-- (tokens = level, refilled_at = t; level is below one then, never capped) described the same schedule, but moved
-- refilled_at, which identifies the last reservation for reserve_slots_ahead's refund: a worker whose grant was empty
-- no longer spoils the refund of one that got slots.
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

CREATE FUNCTION wa_outbox.reserve_slots_ahead(sender text, wanted integer, default_mps double precision,
                                              lead double precision, horizon double precision,
                                              unused integer, reserved_at timestamptz,
                                              OUT granted integer, OUT slots_from timestamptz, OUT level double precision,
                                              OUT refill double precision, OUT paused boolean)
LANGUAGE plpgsql AS $$
BEGIN
    IF unused > 0 THEN
        UPDATE wa_outbox.rate_limits r SET tokens = r.tokens + unused
        WHERE r.phone_number_id = sender AND r.refilled_at = reserved_at
          AND (r.paused_until IS NULL OR r.paused_until <= now());
    END IF;
    SELECT g.granted, g.slots_from, g.level, g.refill, g.paused INTO granted, slots_from, level, refill, paused
    FROM wa_outbox.reserve_slots(sender, wanted, default_mps, lead, horizon) g;
END $$;

-- == Bulk enqueue =====================================================================================================

-- == Webhook ingest ===================================================================================================

-- == Pacing ===========================================================================================================

SELECT 1;
