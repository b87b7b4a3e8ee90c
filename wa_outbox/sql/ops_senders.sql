-- The ops page: every sender, registered (its alias, business account, app, portfolio, token source: 'encrypted' or
-- 'env:' and the variable's name, never the token, and its fingerprint) or not (a phone number id that has a rate
-- or a pause), and the environment's (WHATSAPP_PHONE_NUMBER_ID: environment_sender) unless registered; each with its
-- shared rate, the bucket it makes (bucket_shape: refill rate and capacity; burst NULL is the default pacing; mps
-- NULL: no rate set, the workers' default), the tokens it holds now (refilled up to this moment, as reserve_slots()
-- would; 0 while claims have reserved send slots ahead, which takes tokens before their time), and its pause with
-- the reason; and its health as Meta last reported it (number_health: quality, flag, restriction, ban, tier,
-- throughput, whether its pacing follows Meta; NULLs and false for a number Meta has said nothing of).
-- Safe to repeat: a read.
WITH known AS (
    SELECT s.phone_number_id, s.alias, s.waba_id, b.app_id, b.portfolio_id,
           CASE WHEN s.token_ref IS NOT NULL THEN 'env:' || s.token_ref ELSE 'encrypted' END AS token_source,
           s.token_fingerprint, false AS from_environment
    FROM wa_outbox.senders s
    JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
    UNION ALL
    SELECT e.id, NULL, NULL, NULL, NULL, %(environment_token_source)s::text, %(environment_token_fingerprint)s::text,
           true
    FROM (SELECT %(environment_sender)s::text AS id) e
    WHERE e.id IS NOT NULL AND NOT EXISTS (SELECT FROM wa_outbox.senders s WHERE s.phone_number_id = e.id)
)
SELECT coalesce(k.phone_number_id, r.phone_number_id) AS phone_number_id, k.alias, k.waba_id, k.app_id,
       k.portfolio_id, k.token_source, k.token_fingerprint, coalesce(k.from_environment, false) AS from_environment,
       coalesce(NOT k.from_environment, false) AS registered,
       r.mps, r.burst, sh.refill, sh.capacity,
       CASE WHEN r.phone_number_id IS NOT NULL THEN
           greatest(0, CASE WHEN r.paused_until > now() THEN r.tokens
                            ELSE least(sh.capacity,
                                       r.tokens + extract(epoch FROM clock_timestamp() - r.refilled_at) * sh.refill)
                       END) END AS tokens,
       coalesce(r.paused_until > now(), false) AS paused, r.paused_until, r.pause_reason, r.updated_at,
       h.quality_rating, coalesce(h.flagged, false) AS flagged,
       coalesce(wa_outbox.number_restricted(h.restrictions, h.restricted_until), false) AS restricted,
       h.restricted_until, h.ban_state, coalesce(h.ban_state = ANY(%(banned_states)s), false)
           AS banned,
       h.messaging_limit_tier, h.throughput_level, coalesce(h.follow_meta_throughput, false) AS follow_meta_throughput,
       greatest(h.quality_changed_at, h.account_changed_at) AS health_changed_at
FROM known k
FULL JOIN wa_outbox.rate_limits r ON r.phone_number_id = k.phone_number_id
LEFT JOIN LATERAL wa_outbox.bucket_shape(r.mps, r.burst) sh ON r.phone_number_id IS NOT NULL
LEFT JOIN wa_outbox.number_health h ON h.phone_number_id = k.phone_number_id
ORDER BY 8 DESC, 1
