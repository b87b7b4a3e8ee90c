-- Lift a sender's pause now (`wa-outbox ratelimit resume`, the /ops page), and bring back the messages the pause
-- pushed into the future: the claim deferred them to the pause's end (spaced by the rate after it), and throttled
-- sends were put back to wait it out. Those are the sender's queued messages due between now and a minute after the
-- pause's end; they become due now (the next claim spaces them by the bucket again). Messages waiting on a retry
-- delay of their own further out (131049's 24 h, long backoffs) keep it. One statement for the whole sender.
-- Safe to repeat: a second run finds the pause lifted and nothing deferred by it.
WITH bucket AS (
    SELECT r.phone_number_id, r.paused_until, r.pause_reason FROM wa_outbox.rate_limits r
    WHERE r.phone_number_id = %(phone_number_id)s
    FOR UPDATE
), lifted AS (
    UPDATE wa_outbox.rate_limits r SET paused_until = NULL, pause_reason = NULL, updated_at = now()
    FROM bucket b WHERE r.phone_number_id = b.phone_number_id
    RETURNING r.phone_number_id
), moved AS (
    UPDATE wa_outbox.notifications n SET next_attempt_at = now(), updated_at = now()
    FROM bucket b
    -- Parked followers wait for their line, not for the pause. priority = ANY(…): one range of notifications_due
    -- (priority, next_attempt_at) per priority, not the whole index.
    WHERE n.status = 'queued' AND NOT n.blocked AND n.priority = ANY ('{0,1,2,3,4,5,6,7,8,9}'::smallint[])
      AND n.phone_number_id = b.phone_number_id AND b.paused_until > now()
      AND n.next_attempt_at > now() AND n.next_attempt_at <= b.paused_until + interval '1 minute'
    RETURNING n.id
), woken AS (
    SELECT pg_notify('wa_outbox_notifications', '') FROM moved LIMIT 1
)
SELECT b.phone_number_id, CASE WHEN b.paused_until > now() THEN b.paused_until END AS was_paused_until,
       CASE WHEN b.paused_until > now() THEN b.pause_reason END AS pause_reason,
       (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM woken) AS woken
FROM bucket b
