-- Undo version 4, in reverse order of its sections.

-- == Claim and record ==============================================================================================

-- == Webhook ingest ================================================================================================

-- == History and retention =========================================================================================

-- == Bulk enqueue ==================================================================================================

-- == Pacing per sender ============================================================================================
-- Version 3's grant-now bucket and its shape (one token plus 5 ms of refill), as migration 0003 made them. Negative
-- tokens (slots that were reserved ahead) are simply waited for by take_tokens().
DROP FUNCTION wa_outbox.reserve_slots(text, integer, double precision, double precision, double precision);
CREATE OR REPLACE FUNCTION wa_outbox.take_tokens(sender text, wanted integer, default_mps double precision,
                                                 OUT granted integer, OUT next_token_at timestamptz,
                                                 OUT mps double precision)
LANGUAGE plpgsql AS $$
DECLARE
    b wa_outbox.rate_limits;
    shape record;
    available double precision;
    t timestamptz := clock_timestamp();
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    VALUES (sender, default_mps, NULL, (wa_outbox.bucket_shape(default_mps, NULL)).capacity, t)
    ON CONFLICT (phone_number_id) DO NOTHING;
    SELECT * INTO b FROM wa_outbox.rate_limits r WHERE r.phone_number_id = sender FOR UPDATE;
    shape := wa_outbox.bucket_shape(b.mps, b.burst);
    mps := shape.refill;
    IF b.paused_until > t THEN
        granted := 0;
        next_token_at := b.paused_until;
        RETURN;
    END IF;
    available := least(shape.capacity, b.tokens + extract(epoch FROM t - b.refilled_at) * shape.refill);
    -- (+ 1e-9: a token that is whole but for float rounding is whole)
    granted := greatest(0, least(wanted, floor(available + 1e-9)::integer));
    UPDATE wa_outbox.rate_limits r SET tokens = available - granted, refilled_at = t
    WHERE r.phone_number_id = sender;
    next_token_at := t + make_interval(secs => greatest(0, 1 - (available - granted)) / shape.refill);
END $$;
CREATE OR REPLACE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                       OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN mps * (1 - 0.015) ELSE mps END,
           CASE WHEN burst IS NULL THEN 1 + mps * (1 - 0.015) * 0.005 ELSE burst END
$$;

