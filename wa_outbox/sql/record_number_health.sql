-- Number health from a batch of stored phone_number_quality_update and account_update changes (parsed by
-- wa_outbox/number_health.py health_update; %(entries)s is their JSON array), in one statement:
-- - each change is routed by its business account (webhook_events.account_id): a quality update to the sender whose
--   display number (digits only) is the one it names, or to the account's only sender when that sender has none
--   recorded or the update names none; an account update to every sender of the account;
-- - a change older (by time received) than the one stored for that sender and field is left out (a late redelivery
--   does not undo a newer change); of the batch's changes, each column takes the newest value one of them carries
--   (FLAGGED then UPGRADE in one batch: flagged, and the new tier); a column no change carries keeps its value;
-- - a sender set to follow Meta's throughput (number_health.follow_meta_throughput) whose change carried a
--   throughput level gets that level's rate in its rate_limits row (the pacing every worker reads at its next
--   claim; burst kept).
-- Returns one row per sender written: its throughput and the rate now set for it (NULL: its pacing unchanged).
-- Safe to repeat: applying the same changes again writes the same values.
WITH entry AS (
    SELECT x.*, w.account_id, w.received_at
    FROM jsonb_to_recordset(%(entries)s::jsonb) AS x(
        event_id bigint, field text, display_phone_number text, quality_event text, quality_rating text,
        flagged boolean, messaging_limit_tier text, messaging_limit bigint, throughput_level text,
        throughput_mps double precision, account_event text, restrictions jsonb, restricted_until bigint,
        violation_type text, ban_state text)
    JOIN wa_outbox.webhook_events w ON w.id = x.event_id
), routed AS (
    SELECT s.phone_number_id, e.*
    FROM entry e
    JOIN wa_outbox.senders s ON s.waba_id = e.account_id
    LEFT JOIN wa_outbox.number_health h ON h.phone_number_id = s.phone_number_id
    WHERE (e.field = 'account_update'
           OR regexp_replace(coalesce(s.display_phone_number, ''), '[^0-9]', '', 'g') = e.display_phone_number
           OR ((s.display_phone_number IS NULL OR e.display_phone_number IS NULL)
               AND NOT EXISTS (SELECT FROM wa_outbox.senders o
                               WHERE o.waba_id = s.waba_id AND o.phone_number_id <> s.phone_number_id)))
      AND (e.received_at >= CASE WHEN e.field = 'account_update' THEN h.account_changed_at
                                 ELSE h.quality_changed_at END) IS NOT FALSE
), q AS (  -- (array_agg(x ORDER BY newest first) FILTER (WHERE it says x))[1]: the newest value said
    SELECT phone_number_id, max(received_at) AS changed_at,
           (array_agg(quality_event ORDER BY received_at DESC, event_id DESC))[1] AS quality_event,
           (array_agg(quality_rating ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE quality_rating IS NOT NULL))[1] AS quality_rating,
           (array_agg(flagged ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE quality_rating IS NOT NULL))[1] AS flagged,
           (array_agg(messaging_limit_tier ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE messaging_limit_tier IS NOT NULL))[1] AS messaging_limit_tier,
           (array_agg(messaging_limit ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE messaging_limit_tier IS NOT NULL))[1] AS messaging_limit,
           (array_agg(throughput_level ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE throughput_level IS NOT NULL))[1] AS throughput_level,
           (array_agg(throughput_mps ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE throughput_level IS NOT NULL))[1] AS throughput_mps
    FROM routed WHERE field = 'phone_number_quality_update'
    GROUP BY phone_number_id
), a AS (
    SELECT phone_number_id, max(received_at) AS changed_at,
           (array_agg(account_event ORDER BY received_at DESC, event_id DESC))[1] AS account_event,
           -- an ACCOUNT_RESTRICTION always carries a list (maybe empty): it replaces the restrictions recorded
           (array_agg(coalesce(restrictions, '[]') ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE account_event = 'ACCOUNT_RESTRICTION'))[1] AS restrictions,
           (array_agg(to_timestamp(restricted_until) ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE account_event = 'ACCOUNT_RESTRICTION'))[1] AS restricted_until,
           (array_agg(violation_type ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE violation_type IS NOT NULL))[1] AS violation_type,
           (array_agg(ban_state ORDER BY received_at DESC, event_id DESC)
                FILTER (WHERE ban_state IS NOT NULL))[1] AS ban_state
    FROM routed WHERE field = 'account_update'
    GROUP BY phone_number_id
), written AS (
    -- In SET, a NULL in `excluded` is "no change of the batch says": the stored value stays.
    INSERT INTO wa_outbox.number_health AS h (
        phone_number_id, quality_rating, quality_event, messaging_limit_tier, messaging_limit, throughput_level,
        throughput_mps, flagged, restrictions, restricted_until, ban_state, account_event, violation_type,
        quality_changed_at, account_changed_at)
    SELECT coalesce(q.phone_number_id, a.phone_number_id), q.quality_rating, q.quality_event,
           q.messaging_limit_tier, q.messaging_limit, q.throughput_level, q.throughput_mps,
           coalesce(q.flagged, false), a.restrictions, a.restricted_until, a.ban_state, a.account_event,
           a.violation_type, q.changed_at, a.changed_at
    FROM q FULL JOIN a ON a.phone_number_id = q.phone_number_id
    ON CONFLICT (phone_number_id) DO UPDATE SET
        quality_rating = coalesce(excluded.quality_rating, h.quality_rating),
        previous_quality_rating = CASE WHEN excluded.quality_rating IS DISTINCT FROM h.quality_rating
                                            AND excluded.quality_rating IS NOT NULL
                                       THEN h.quality_rating ELSE h.previous_quality_rating END,
        quality_event = coalesce(excluded.quality_event, h.quality_event),
        messaging_limit_tier = coalesce(excluded.messaging_limit_tier, h.messaging_limit_tier),
        messaging_limit = CASE WHEN excluded.messaging_limit_tier IS NOT NULL THEN excluded.messaging_limit
                               ELSE h.messaging_limit END,
        throughput_level = coalesce(excluded.throughput_level, h.throughput_level),
        throughput_mps = CASE WHEN excluded.throughput_level IS NOT NULL THEN excluded.throughput_mps
                              ELSE h.throughput_mps END,
        -- the flag is said with a rating (FLAGGED, UNFLAGGED, or a rating given); UPGRADE, ONBOARDING keep it
        flagged = CASE WHEN excluded.quality_rating IS NOT NULL THEN excluded.flagged ELSE h.flagged END,
        restrictions = coalesce(excluded.restrictions, h.restrictions),
        restricted_until = CASE WHEN excluded.restrictions IS NOT NULL THEN excluded.restricted_until
                                ELSE h.restricted_until END,
        ban_state = coalesce(excluded.ban_state, h.ban_state),
        violation_type = coalesce(excluded.violation_type, h.violation_type),
        account_event = coalesce(excluded.account_event, h.account_event),
        quality_changed_at = coalesce(excluded.quality_changed_at, h.quality_changed_at),
        account_changed_at = coalesce(excluded.account_changed_at, h.account_changed_at),
        updated_at = now()
    RETURNING h.phone_number_id, h.throughput_mps, h.follow_meta_throughput
), paced AS (  -- the senders that follow Meta's throughput, and whose changes in this batch carried a level
    INSERT INTO wa_outbox.rate_limits AS r (phone_number_id, mps, burst, tokens)
    SELECT w.phone_number_id, w.throughput_mps, NULL, (wa_outbox.bucket_shape(w.throughput_mps, NULL)).capacity
    FROM written w JOIN q ON q.phone_number_id = w.phone_number_id
    WHERE w.follow_meta_throughput AND w.throughput_mps IS NOT NULL AND q.throughput_level IS NOT NULL
    ON CONFLICT (phone_number_id) DO UPDATE
    SET mps = excluded.mps,
        tokens = least(r.tokens, (wa_outbox.bucket_shape(excluded.mps, r.burst)).capacity),
        updated_at = now()
    WHERE r.mps IS DISTINCT FROM excluded.mps
    RETURNING r.phone_number_id, r.mps
)
SELECT w.phone_number_id, w.throughput_mps, p.mps AS paced_mps
FROM written w LEFT JOIN paced p ON p.phone_number_id = w.phone_number_id
ORDER BY w.phone_number_id
