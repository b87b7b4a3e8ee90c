-- Set a sender's rate (messages per second, shared by all workers) and optionally clear a pause.
-- Safe to repeat: an upsert of the same values.
INSERT INTO wa_outbox.rate_limits AS r (phone_number_id, mps, burst, tokens)
VALUES (%(phone_number_id)s, %(mps)s, %(burst)s, %(burst)s)
ON CONFLICT (phone_number_id) DO UPDATE
SET mps = excluded.mps, burst = excluded.burst, tokens = least(r.tokens, excluded.burst),
    paused_until = CASE WHEN %(resume)s THEN NULL ELSE r.paused_until END,
    pause_reason = CASE WHEN %(resume)s THEN NULL ELSE r.pause_reason END,
    updated_at = now()
RETURNING phone_number_id, mps, burst, paused_until
