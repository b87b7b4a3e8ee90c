-- The claim takes no lock twice (issue 19, bench/senders.py: serving 64 senders, one row each, a claim spent ~1.5 ms
-- of its ~10 re-taking locks it held and calling bucket_shape(), each call a little query of its own):
--  * bucket_refill() and bucket_capacity(), the bucket's shape as two single expressions the planner inlines;
--    bucket_shape() returns them (same results);
--  * reserve_slots_set() gains `held` (the caller holds the senders' row locks: none created or locked again).
-- Brief: functions replaced, no table read or written.
CREATE FUNCTION wa_outbox.bucket_refill(mps double precision, burst double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NOT NULL THEN mps
                WHEN mps <= 1000 THEN mps * (1 - 0.015)
                ELSE mps / (1 + wa_outbox.slot_margin(mps, NULL)) END
$$;


CREATE FUNCTION wa_outbox.bucket_capacity(mps double precision, burst double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN 1 ELSE burst END
$$;


CREATE OR REPLACE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                       OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT wa_outbox.bucket_refill(mps, burst), wa_outbox.bucket_capacity(mps, burst)
$$;


DROP FUNCTION wa_outbox.reserve_slots_set(text[], integer[], double precision, double precision, double precision,
                                          boolean);
CREATE FUNCTION wa_outbox.reserve_slots_set(senders text[], wants integer[], default_mps double precision,
                                            lead double precision, horizon double precision,
                                            capped boolean DEFAULT true, held boolean DEFAULT false)
    RETURNS TABLE (phone_number_id text, granted integer, slots_from timestamptz, level double precision,
                   refill double precision, paused boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF NOT held THEN
        INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
        SELECT u.s, default_mps, NULL, wa_outbox.bucket_capacity(default_mps, NULL), clock_timestamp()
        FROM unnest(senders) AS u(s)
        WHERE NOT EXISTS (SELECT 1 FROM wa_outbox.rate_limits r WHERE r.phone_number_id = u.s)
        ORDER BY u.s
        ON CONFLICT (phone_number_id) DO NOTHING;
        PERFORM FROM wa_outbox.rate_limits r WHERE r.phone_number_id = ANY (senders)
        ORDER BY r.phone_number_id FOR UPDATE;
    END IF;
    RETURN QUERY
    WITH locked AS MATERIALIZED (  -- locked above, or by the caller (`held`); = ANY: key look-ups, never a scan
        SELECT r.phone_number_id AS sender, r.mps, r.burst, r.tokens, r.refilled_at, r.paused_until, u.n AS wanted
        FROM wa_outbox.rate_limits r JOIN unnest(senders, wants) AS u(s, n) ON u.s = r.phone_number_id
        WHERE r.phone_number_id = ANY (senders)
    ), timed AS MATERIALIZED (  -- the earliest slot, read after the locks
        SELECT l.*, sh.refill AS rate, sh.capacity,
               clock_timestamp()
                   + make_interval(secs => CASE WHEN capped THEN least(lead, 1 / sh.refill) ELSE lead END) AS t
        FROM locked l, LATERAL (SELECT wa_outbox.bucket_refill(l.mps, l.burst) AS refill,
                                       wa_outbox.bucket_capacity(l.mps, l.burst) AS capacity) sh
    ), shaped AS MATERIALIZED (
        SELECT x.sender, x.rate, x.wanted, coalesce(x.paused_until > x.t, false) AS halted,
               CASE WHEN x.paused_until > x.t THEN x.paused_until ELSE x.t END AS slots_at,
               CASE WHEN x.paused_until > x.t THEN x.capacity  -- the bucket refills during the pause
                    ELSE least(x.capacity, x.tokens + extract(epoch FROM x.t - x.refilled_at) * x.rate) END AS lvl
        FROM timed x
    ), decided AS MATERIALIZED (
        -- slot k is within the horizon while (k - level) / refill <= horizon (+ 1e-9: float rounding)
        SELECT s.*, CASE WHEN s.halted THEN 0
                         ELSE greatest(0, least(s.wanted, floor(s.lvl + horizon * s.rate + 1e-9)::integer)) END AS n
        FROM shaped s
    ), moved AS (  -- an empty grant leaves the schedule as it was (see reserve_slots_ahead)
        UPDATE wa_outbox.rate_limits r SET tokens = d.lvl - d.n, refilled_at = d.slots_at
        FROM decided d WHERE r.phone_number_id = d.sender AND d.n > 0
    )
    SELECT d.sender, d.n, d.slots_at, d.lvl, d.rate, d.halted FROM decided d ORDER BY d.sender;
END $$;
