-- Pause one recipient after a pair-rate-limit answer (131056): 4^n seconds, n the strikes so far (capped).
INSERT INTO wa_outbox.contacts AS c (phone_number_id, wa_id, pair_strikes, pair_paused_until)
VALUES (%(phone_number_id)s, %(wa_id)s, 1, now() + make_interval(secs => 4))
ON CONFLICT (phone_number_id, wa_id) DO UPDATE
SET pair_strikes = least(c.pair_strikes + 1, 6),
    pair_paused_until = now() + make_interval(secs => power(4, least(c.pair_strikes + 1, 6))),
    updated_at = now()
RETURNING pair_paused_until
