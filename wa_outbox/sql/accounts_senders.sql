-- The senders (`senders list | show`, GET /v1/senders): each registered one with its alias, business account, app,
-- portfolio, token source ('encrypted', or 'env:' and the variable's name: never the token) and fingerprint, and
-- its pacing and pause (rate_limits: mps NULL is the default rate), then the environment's sender
-- (WHATSAPP_PHONE_NUMBER_ID: environment_sender) unless it is registered (the table wins, as in registry.load).
-- Then its health as Meta last reported it (number_health: quality, tier, throughput, flag, restrictions, ban) and
-- whether its pacing follows Meta's throughput; NULLs (false) for a number Meta has said nothing of.
-- phone_number_id NULL: every sender.
-- Safe to repeat: it only reads.
SELECT s.phone_number_id, s.alias, s.waba_id, b.app_id, b.portfolio_id, s.display_phone_number,
       CASE WHEN s.token_ref IS NOT NULL THEN 'env:' || s.token_ref ELSE 'encrypted' END AS token_source,
       s.token_fingerprint, s.token_updated_at, false AS from_environment,
       r.mps, r.burst, coalesce(r.paused_until > now(), false) AS paused,
       CASE WHEN r.paused_until > now() THEN r.paused_until END AS paused_until,
       CASE WHEN r.paused_until > now() THEN r.pause_reason END AS pause_reason,
       s.created_at, s.updated_at,
       h.quality_rating, h.quality_event, h.messaging_limit_tier, h.messaging_limit, h.throughput_level,
       h.throughput_mps, coalesce(h.flagged, false) AS flagged,
       coalesce(wa_outbox.number_restricted(h.restrictions, h.restricted_until), false) AS restricted,
       h.restrictions, h.restricted_until, h.ban_state, h.account_event, h.violation_type,
       greatest(h.quality_changed_at, h.account_changed_at) AS health_changed_at,
       coalesce(h.follow_meta_throughput, false) AS follow_meta_throughput
FROM wa_outbox.senders s
JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
LEFT JOIN wa_outbox.rate_limits r ON r.phone_number_id = s.phone_number_id
LEFT JOIN wa_outbox.number_health h ON h.phone_number_id = s.phone_number_id
WHERE %(phone_number_id)s::text IS NULL OR s.phone_number_id = %(phone_number_id)s
UNION ALL
SELECT e.id, NULL, NULL, NULL, NULL, NULL, %(environment_token_source)s::text, %(environment_token_fingerprint)s::text,
       NULL, true, r.mps, r.burst, coalesce(r.paused_until > now(), false),
       CASE WHEN r.paused_until > now() THEN r.paused_until END,
       CASE WHEN r.paused_until > now() THEN r.pause_reason END, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, false, false, NULL, NULL, NULL, NULL, NULL, NULL, false
FROM (SELECT %(environment_sender)s::text AS id) e
LEFT JOIN wa_outbox.rate_limits r ON r.phone_number_id = e.id
WHERE e.id IS NOT NULL AND NOT EXISTS (SELECT FROM wa_outbox.senders s WHERE s.phone_number_id = e.id)
  AND (%(phone_number_id)s::text IS NULL OR e.id = %(phone_number_id)s)
ORDER BY from_environment DESC, phone_number_id
