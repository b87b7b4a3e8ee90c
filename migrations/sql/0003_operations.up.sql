-- wa-outbox schema, version 3: pacing that never trips Meta's limits, per-recipient order, campaigns, and what the
-- operator's tools (ops page, metrics from the workers) read. Each engineer's part has its own section.

-- == Campaigns: the shared shape (claim order and campaign steering both read it) ==================================
-- A campaign is a named set of messages an operator imports and steers as one (wa-outbox campaign …).
CREATE TABLE wa_outbox.campaigns (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    phone_number_id  text NOT NULL,
    status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'cancelled')),
    pause_reason     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT campaigns_name UNIQUE (name)
);
-- A message's campaign (NULL: a transactional message). No foreign key: the check would cost a look-up per row of
-- a bulk import; campaigns are never deleted while they have messages.
ALTER TABLE wa_outbox.notifications ADD COLUMN campaign_id bigint;
-- Claim order: lower first. Transactional messages (0) go before campaign messages (1) when both wait, so a 50,000-row
-- campaign never delays an order confirmation.
ALTER TABLE wa_outbox.notifications ADD COLUMN priority smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9);
CREATE INDEX notifications_campaign ON wa_outbox.notifications (campaign_id, status) WHERE campaign_id IS NOT NULL;

-- == Pacing per sender =============================================================================================
-- The bucket's shape. The operator configures `mps`, the most a sender may send in any one-second window (Meta
-- answers 130429 beyond it). A token bucket of refill rate R and capacity B grants at most B + R*L in any window of
-- length L, so a bucket that refills at `mps` with one second of burst (what version 1 did) saw 27-33 sends in a
-- second at a limit of 20. By default (burst NULL) the bucket refills a little slower than the limit and holds
-- barely more than one token:
--   R = mps * (1 - 0.015)         98.5 % of the limit, the rate a busy sender actually reaches;
--   B = 1 + R * 0.005             one token, plus 5 ms of refill: a claim up to 5 ms late loses nothing.
-- Then B + R * (1 + J) < mps + 1 for any J (delay between grant and arrival at Meta, varying by send) up to ~10 ms,
-- so no window of one second at Meta's end ever holds more than `mps` sends: (1 + 0.005 + J) * 0.985 < 1.
-- An explicit burst (`wa-outbox ratelimit set --burst B`) is the classic bucket for those who want bursts: refill at
-- `mps`, capacity B, so a one-second window may hold up to B + mps sends.
CREATE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                       OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN mps * (1 - 0.015) ELSE mps END,
           CASE WHEN burst IS NULL THEN 1 + mps * (1 - 0.015) * 0.005 ELSE burst END
$$;
ALTER TABLE wa_outbox.rate_limits ALTER COLUMN burst DROP NOT NULL;
-- Buckets created with version 1's default burst (one second of tokens) get the default pacing.
UPDATE wa_outbox.rate_limits SET burst = NULL WHERE burst = greatest(1, mps);
COMMENT ON COLUMN wa_outbox.rate_limits.burst IS
    'NULL: the default pacing (never more than mps in any one-second window); a number: a classic bucket of that size';

-- take_tokens(): the shared token bucket, shaped by bucket_shape(). Grants up to `wanted` sends for a sender now
-- (0 while it is paused) and says when the next token will be there and at what rate the following ones come (the
-- claim spaces the rows it could not grant by that rate); creates the bucket at the default rate on first use. The
-- row lock makes concurrent workers on any number of machines share one rate.
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

-- Messages Meta reported `failed` belong to the dead-letter queue (dlq list, /v1/dead) with the dead ones: one
-- partial index serves its newest-first pages.
CREATE INDEX notifications_dead_or_failed ON wa_outbox.notifications (id) WHERE status IN ('dead', 'failed');

-- == Per recipient: pacing, order, the service window ============================================================

-- == Campaigns: steering ===========================================================================================

-- == Metrics from the workers ======================================================================================

-- == Ops page ======================================================================================================

