-- Version 4: scale. One section per concern; the down file undoes them in reverse order.

-- == Pacing per sender ============================================================================================
-- Reserved send slots: a generic cell rate algorithm per sender. Version 3's bucket granted tokens "now", and the
-- send followed after the rest of the claim, its commit and a thread hand-off: that delay varied by tens of ms, so
-- sends granted 1/R apart could arrive closer together than that, and a bucket of about one token lost every token
-- that came while no worker was asking. Now a claim reserves each row's send time (its slot) up to a short horizon
-- ahead, slots spaced 1/R, and the worker sends each row at its slot: the spacing at Meta's end is the slot spacing
-- plus a small, nearly constant delay, and the rate no longer depends on how fast workers come back to claim.
-- The state stays in rate_limits (tokens, refilled_at): the bucket level at time t is
--     tokens + (t - refilled_at) * refill, at most the capacity,
-- and the k-th slot a claim takes is when that level reaches k: t + greatest(0, k - level) / refill. Reserving k
-- slots takes k tokens at once, so `tokens` goes negative while slots are reserved ahead (at most horizon * refill).
-- That is exactly a GCRA with tolerance (capacity - 1) / refill; the theoretical time of the next slot is
-- refilled_at + (capacity - tokens) / refill.
-- The shape: by default (burst NULL) the refill is 98.5 % of `mps` and the capacity exactly one slot, so consecutive
-- sends are 1/(0.985 mps) apart and any mps + 1 of them span 1.015 s: a send may arrive up to 15 ms later than its
-- slot relative to the others (grant-to-arrival jitter; bench/pacing.py measures it) and still no one-second window
-- at Meta's end holds more than mps. An explicit burst (`ratelimit set --burst B`) is the classic bucket: refill at
-- mps, capacity B.
CREATE OR REPLACE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                                  OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN mps * (1 - 0.015) ELSE mps END,
           CASE WHEN burst IS NULL THEN 1 ELSE burst END
$$;

-- reserve_slots(): up to `wanted` send slots for a sender, none earlier than `lead` seconds from now (the claim's
-- own latency: its rows reach the worker before their slot, so an idle sender's first send is not late on its slot
-- and squeezed against the next ones; at most one slot interval, so at rates the workers cannot reach, where the
-- schedule never fills, a claim's rows still go at once) and none later than `horizon` seconds after that; none
-- while it is paused.
-- Slot k (1-based) is at slots_from + greatest(0, k - level) / refill; the caller puts a row that got no slot back
-- until its slot would come within the horizon (the same formula). Paused: slots_from is the pause's end and
-- nothing is granted. Creates the bucket at the default rate on first use. The row lock makes concurrent workers on
-- any number of machines share one schedule; the time is read after it is taken, so a claim that waited for the
-- lock still reserves from the schedule as the previous holder left it.
CREATE FUNCTION wa_outbox.reserve_slots(sender text, wanted integer, default_mps double precision,
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
    UPDATE wa_outbox.rate_limits r SET tokens = level - granted, refilled_at = t WHERE r.phone_number_id = sender;
END $$;
-- Version 3's grant-now bucket: replaced by reserve_slots().
DROP FUNCTION wa_outbox.take_tokens(text, integer, double precision);

-- == Bulk enqueue ==================================================================================================

-- == History and retention =========================================================================================

-- == Webhook ingest ================================================================================================

-- == Claim and record ==============================================================================================
SELECT 1;
