-- Lift a sender's pause now (an operator fixed the token or the account): clear paused_until and the reason, and
-- bring that sender's queued messages which the pause had pushed past now (next_attempt_at up to the pause's end,
-- plus a minute: the delay written with an outcome is counted from a moment after the pause's own) back to now(),
-- waking the workers. Returns one row if the sender exists.
-- Safe to repeat: a second run finds no pause, so it moves nothing.
WITH old AS (
    SELECT r.phone_number_id, r.paused_until FROM wa_outbox.rate_limits r
    WHERE r.phone_number_id = %(phone_number_id)s
    FOR UPDATE
), resumed AS (
    UPDATE wa_outbox.rate_limits r SET paused_until = NULL, pause_reason = NULL, updated_at = now()
    FROM old WHERE r.phone_number_id = old.phone_number_id
    RETURNING r.phone_number_id, old.paused_until AS was_paused_until
), moved AS (
    UPDATE wa_outbox.notifications n SET next_attempt_at = now(), updated_at = now()
    FROM resumed
    WHERE n.status = 'queued' AND n.phone_number_id = resumed.phone_number_id
      AND n.next_attempt_at > now() AND n.next_attempt_at <= resumed.was_paused_until + interval '1 minute'
    RETURNING n.id
), woken AS (
    SELECT pg_notify('wa_outbox_notifications', '') FROM moved LIMIT 1
)
SELECT r.phone_number_id, r.was_paused_until, (SELECT count(*) FROM moved) AS moved,
       (SELECT count(*) FROM woken) AS woken
FROM resumed r
