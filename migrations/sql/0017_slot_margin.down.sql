-- Version 16's bucket_shape (refill 98.5 % of mps at every rate), without slot_margin().
CREATE OR REPLACE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                                  OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN mps * (1 - 0.015) ELSE mps END,
           CASE WHEN burst IS NULL THEN 1 ELSE burst END
$$;

DROP FUNCTION wa_outbox.slot_margin(double precision, double precision);
