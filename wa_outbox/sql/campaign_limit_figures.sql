-- A campaign's figures at its portfolio's messaging limit (campaign show, campaign import --dry-run, GET
-- /v1/campaigns/<name>): for sender %(sender)s (a phone number id or alias), of the customers the campaign would send
-- a template to (%(recipients)s: a JSON array of the recipients of a file's templates; or the queued templates of
-- campaign %(campaign_id)s), how many would take a unit (wa_outbox.counts_against_limit: no open window with that
-- sender, not counted in the last 24 hours); the portfolio's limit, its units in the window (their times, oldest
-- first, for the finish estimate: messaging_limit.py campaign_finish) and what is left. No row's portfolio: nothing
-- known (no limit). Not a hot path: reads each recipient once.
-- Safe to repeat: a read.
WITH sender AS (
    SELECT s.phone_number_id, b.portfolio_id FROM wa_outbox.senders s
    JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
    WHERE s.phone_number_id = %(sender)s::text OR s.alias = %(sender)s::text
    ORDER BY s.phone_number_id = %(sender)s::text DESC LIMIT 1
), recipients AS (
    SELECT r.wa_id FROM jsonb_array_elements_text(coalesce(%(recipients)s::jsonb, '[]'::jsonb)) AS r(wa_id)
    UNION
    SELECT n.recipient FROM wa_outbox.notifications n
    WHERE n.campaign_id = %(campaign_id)s::bigint AND n.status = 'queued'
      AND coalesce(n.message->>'type', CASE WHEN n.message ? 'template' THEN 'template' END) = 'template'
), units AS (
    SELECT u.counted_at FROM wa_outbox.portfolio_units u, sender se
    WHERE u.portfolio_id = se.portfolio_id AND u.counted_at > now() - interval '24 hours'
)
SELECT se.phone_number_id, se.portfolio_id, po.messaging_limit,
       (SELECT count(*) FROM units)::integer AS used,
       CASE WHEN po.messaging_limit IS NOT NULL
            THEN greatest(0, po.messaging_limit - (SELECT count(*) FROM units))::integer END AS remaining,
       (SELECT count(*) FROM recipients)::integer AS recipients,
       (SELECT count(*) FROM recipients r
        LEFT JOIN wa_outbox.contacts k ON k.phone_number_id = se.phone_number_id AND k.wa_id = r.wa_id
        WHERE wa_outbox.counts_against_limit(
                  true, k.last_inbound_at,
                  (SELECT max(u.counted_at) FROM wa_outbox.portfolio_units u
                   WHERE u.portfolio_id = se.portfolio_id AND u.wa_id = r.wa_id), now()))::integer AS counting,
       coalesce((SELECT array_agg(u.counted_at ORDER BY u.counted_at) FROM units u), ARRAY[]::timestamptz[])
           AS units,
       now() AS at
FROM (SELECT 1) one
LEFT JOIN sender se ON true
LEFT JOIN wa_outbox.portfolios po ON po.portfolio_id = se.portfolio_id
