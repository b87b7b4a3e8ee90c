-- The business portfolios (%(portfolio_id)s: one; NULL: all) as operators see them: every portfolio a business
-- account belongs to or a limit was set for, its messaging limit (NULL: none enforced) and where it came from, the
-- customers counted in the last 24 hours (its units), what is left, when the oldest unit frees, and its messages
-- waiting: queued in its senders, and of those held by the limit. Not a hot path: counts what it shows.
SELECT p.portfolio_id, po.messaging_limit, po.limit_source, po.updated_at,
       u.used, CASE WHEN po.messaging_limit IS NOT NULL THEN greatest(0, po.messaging_limit - u.used) END AS remaining,
       CASE WHEN u.oldest IS NOT NULL THEN wa_outbox.next_unit_frees(u.oldest, now()) END AS next_unit_frees_at,
       coalesce(q.queued, 0) AS queued, coalesce(q.held, 0) AS held,
       coalesce(a.business_accounts, ARRAY[]::text[]) AS business_accounts,
       coalesce(a.senders, ARRAY[]::text[]) AS senders
FROM (SELECT b.portfolio_id FROM wa_outbox.business_accounts b WHERE b.portfolio_id IS NOT NULL
      UNION SELECT x.portfolio_id FROM wa_outbox.portfolios x) p
LEFT JOIN wa_outbox.portfolios po ON po.portfolio_id = p.portfolio_id
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS used, min(k.counted_at) AS oldest FROM wa_outbox.portfolio_units k
    WHERE k.portfolio_id = p.portfolio_id AND k.counted_at > now() - interval '24 hours') u
LEFT JOIN LATERAL (
    SELECT array_agg(DISTINCT b.waba_id ORDER BY b.waba_id) AS business_accounts,
           array_remove(array_agg(DISTINCT s.phone_number_id ORDER BY s.phone_number_id), NULL) AS senders
    FROM wa_outbox.business_accounts b LEFT JOIN wa_outbox.senders s ON s.waba_id = b.waba_id
    WHERE b.portfolio_id = p.portfolio_id) a ON true
LEFT JOIN LATERAL (
    SELECT count(*)::integer AS queued, (count(*) FILTER (WHERE n.hold_reason = 'messaging_limit'))::integer AS held
    FROM wa_outbox.notifications n
    WHERE n.status = 'queued' AND n.phone_number_id = ANY (a.senders)) q ON true
WHERE %(portfolio_id)s::text IS NULL OR p.portfolio_id = %(portfolio_id)s::text
ORDER BY p.portfolio_id
