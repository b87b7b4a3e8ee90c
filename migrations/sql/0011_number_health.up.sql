-- Phone number quality and throughput as Meta reports them (phone_number_quality_update, account_update webhooks),
-- one row per registered sender, and whether its pacing follows the throughput Meta grants it.
CREATE TABLE wa_outbox.number_health (
    phone_number_id         text PRIMARY KEY REFERENCES wa_outbox.senders (phone_number_id) ON DELETE CASCADE,
    quality_rating          text CHECK (quality_rating IN ('GREEN', 'YELLOW', 'RED', 'UNKNOWN')),
    previous_quality_rating text,         -- the rating before the last change of it (a drop: it was higher)
    quality_event           text,         -- the last phone_number_quality_update event: FLAGGED, UPGRADE, ...
    messaging_limit_tier    text,         -- as Meta names it: TIER_1K, TIER_UNLIMITED, ...
    messaging_limit         bigint,       -- the number the tier names (NULL: unlimited, not set or unknown)
    throughput_level        text,         -- STANDARD, HIGH, NOT_APPLICABLE
    throughput_mps          double precision CHECK (throughput_mps > 0),  -- what the level allows (80, 1000)
    flagged                 boolean NOT NULL DEFAULT false,
    restrictions            jsonb,        -- account_update ACCOUNT_RESTRICTION's restriction_info, as sent
    restricted_until        timestamptz,  -- the latest expiration among them (NULL with restrictions: no end given)
    ban_state               text,         -- account_update DISABLED_UPDATE's ban_info.waba_ban_state
    account_event           text,         -- the last account_update event: ACCOUNT_RESTRICTION, ACCOUNT_VIOLATION, ...
    violation_type          text,         -- account_update ACCOUNT_VIOLATION's violation_info.violation_type
    quality_changed_at      timestamptz,  -- when the last quality change applied was received
    account_changed_at      timestamptz,  -- ... and the last account change applied
    follow_meta_throughput  boolean NOT NULL DEFAULT false,  -- its rate_limits mps follows throughput_mps
    updated_at              timestamptz NOT NULL DEFAULT now()
);

-- Whether a number is restricted now (account_update ACCOUNT_RESTRICTION): restrictions recorded and none known to
-- have ended (no expiration given, or the latest one still ahead). Read by /metrics and the senders' listing.
CREATE FUNCTION wa_outbox.number_restricted(restrictions jsonb, restricted_until timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(restrictions) = 'array' THEN restrictions END), 0) > 0
           AND (restricted_until IS NULL OR restricted_until > now())
$$;

-- == Enqueue (issue 23: the first hour) ==
-- check_message(): what enqueue() would refuse, asked without raising, for SQL callers in any language with plain text
-- arguments (the message as JSON text): NULL when enqueue() would queue it, else the reason it would raise with.
-- enqueue() raising aborts the caller's transaction (that is SQL; docs/enqueue.md shows a SAVEPOINT); asking first
-- keeps it. The same rules in the same order as enqueue(): recipient_problem(), message_problem(), key_problem(),
-- sender_choice(). STABLE: the sender rule reads the registered senders and the default.
CREATE FUNCTION wa_outbox.check_message(
    to_ text,
    message text,
    idempotency_key text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    phone_number_id text DEFAULT NULL
) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_message jsonb;
BEGIN
    BEGIN
        v_message := message::jsonb;
    EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN  -- not JSON, or a \u0000
        RETURN '`message` is not JSON Postgres can store: ' || SQLERRM;
    END;
    RETURN coalesce(wa_outbox.recipient_problem(to_jsonb(to_)), wa_outbox.message_problem(v_message),
                    wa_outbox.key_problem('idempotency_key', to_jsonb(check_message.idempotency_key)),
                    wa_outbox.key_problem('correlation_id', to_jsonb(check_message.correlation_id)),
                    (wa_outbox.sender_choice(check_message.phone_number_id))[2]);
END $$;
