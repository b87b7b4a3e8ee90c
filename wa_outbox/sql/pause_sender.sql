-- Pause a sender (throttled, in maintenance, or blocked until a human acts): every worker's claims grant it no tokens
-- until then. A bucket created here gets the default pacing (burst NULL: see bucket_shape in schema.sql).
-- The bucket is emptied as of its last claim, keeping the send slots other workers reserved ahead (negative tokens)
-- on the schedule: a pause lifted early (`ratelimit resume`) never hands those moments out twice.
-- Every worker hears of it at commit (NOTIFY, payload `pause <phone_number_id> <seconds left>`: worker/_sender.py
-- reads it) and gives back the rows it holds for that sender, still waiting for their send slot: without it, the
-- others would send up to a horizon of reserved slots into a sender Meta just told us to slow down.
-- Safe to repeat: the pause is the later of the two.
WITH paused AS (
    INSERT INTO wa_outbox.rate_limits AS r (phone_number_id, mps, burst, tokens, paused_until, pause_reason)
    VALUES (%(phone_number_id)s, %(default_mps)s, NULL, 0,
            now() + make_interval(secs => %(seconds)s), %(reason)s)
    ON CONFLICT (phone_number_id) DO UPDATE
    SET paused_until = greatest(r.paused_until, excluded.paused_until), pause_reason = excluded.pause_reason,
        tokens = least(r.tokens, 0), updated_at = now()
    RETURNING r.phone_number_id, extract(epoch FROM r.paused_until - now())::double precision AS seconds
)
SELECT pg_notify('wa_outbox_notifications', 'pause ' || phone_number_id || ' ' || seconds) FROM paused
