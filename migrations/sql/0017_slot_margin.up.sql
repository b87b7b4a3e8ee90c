-- slot_margin(): how much later than its slot a send may go and no second at Meta's end holds more than mps; above
-- Meta's highest throughput (1,000 mps) the margin grows with the rate (schema.sql says why). bucket_shape() spaces
-- the default schedule by it. Brief: two functions replaced, no table read.
CREATE FUNCTION wa_outbox.slot_margin(mps double precision, burst double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NOT NULL THEN 0
                WHEN mps <= 1000 THEN 1 / (1 - 0.015) - 1
                ELSE (1 / (1 - 0.015) - 1) * mps / 1000 END
$$;

CREATE OR REPLACE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                                  OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NOT NULL THEN mps
                WHEN mps <= 1000 THEN mps * (1 - 0.015)
                ELSE mps / (1 + wa_outbox.slot_margin(mps, NULL)) END,
           CASE WHEN burst IS NULL THEN 1 ELSE burst END
$$;
