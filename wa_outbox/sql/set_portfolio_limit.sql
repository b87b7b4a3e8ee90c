-- Set a business portfolio's messaging limit to %(messaging_limit)s (NULL: none enforced), from %(source)s
-- ('operator': the CLI or /v1; 'webhook': a business_capability_update), under the lock portfolio_lock.sql took in
-- this transaction, in one statement: its freed units go, `used` is counted again exactly, and when the limit is
-- raised (or cleared) every message the limit holds in the portfolio's senders is released at once (due now, a
-- `released` timeline row; the claim judges it again) and the workers are woken.
WITH expired AS (
    DELETE FROM wa_outbox.portfolio_units u
    WHERE u.portfolio_id = %(portfolio_id)s AND u.counted_at <= now() - interval '24 hours'
), previous AS (
    SELECT po.messaging_limit FROM wa_outbox.portfolios po WHERE po.portfolio_id = %(portfolio_id)s
), updated AS (
    UPDATE wa_outbox.portfolios po
    SET messaging_limit = %(messaging_limit)s::integer, limit_source = %(source)s, updated_at = now(),
        used = (SELECT count(*) FROM wa_outbox.portfolio_units u
                WHERE u.portfolio_id = %(portfolio_id)s AND u.counted_at > now() - interval '24 hours')
    WHERE po.portfolio_id = %(portfolio_id)s
    RETURNING po.portfolio_id
), released AS (
    UPDATE wa_outbox.notifications n
    SET next_attempt_at = least(n.next_attempt_at, now()), hold_reason = NULL, updated_at = now()
    WHERE n.hold_reason = 'messaging_limit' AND n.status = 'queued'
      AND n.phone_number_id IN (SELECT s.phone_number_id FROM wa_outbox.senders s
                                JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
                                WHERE b.portfolio_id = %(portfolio_id)s)
      AND (%(messaging_limit)s::integer IS NULL
           OR %(messaging_limit)s::integer > coalesce((SELECT p.messaging_limit FROM previous p), 0))
    RETURNING n.id, n.attempts, n.correlation_id
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT r.id, 'released', r.attempts,
           jsonb_build_object('reason', 'messaging_limit_raised', 'portfolio_id', %(portfolio_id)s::text,
                              'messaging_limit', %(messaging_limit)s::integer),
           r.correlation_id
    FROM released r
), woken AS (
    SELECT pg_notify('wa_outbox_notifications', '') WHERE EXISTS (SELECT 1 FROM released)
)
SELECT (SELECT count(*) FROM released)::integer AS released, (SELECT count(*) FROM woken)::integer AS woken,
       (SELECT count(*) FROM updated)::integer AS updated
