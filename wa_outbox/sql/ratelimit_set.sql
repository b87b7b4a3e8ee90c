-- Set a sender's rate (messages per second, shared by all workers) and optionally clear a pause. A NULL burst is
-- the default pacing (never more than mps in any one-second window: bucket_shape in schema.sql); a number is a
-- classic bucket of that size.
-- Safe to repeat: an upsert of the same values.
INSERT INTO wa_outbox.rate_limits AS r (phone_number_id, mps, burst, tokens)
VALUES (%(phone_number_id)s, %(mps)s, %(burst)s, (wa_outbox.bucket_shape(%(mps)s, %(burst)s)).capacity)
ON CONFLICT (phone_number_id) DO UPDATE
SET mps = excluded.mps, burst = excluded.burst,
    tokens = least(r.tokens, (wa_outbox.bucket_shape(excluded.mps, excluded.burst)).capacity),
    paused_until = CASE WHEN %(resume)s THEN NULL ELSE r.paused_until END,
    pause_reason = CASE WHEN %(resume)s THEN NULL ELSE r.pause_reason END,
    updated_at = now()
RETURNING phone_number_id, mps, burst, paused_until
