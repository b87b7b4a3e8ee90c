-- Undo version 3, in reverse order of its sections.

-- == Ops page ======================================================================================================
DROP INDEX wa_outbox.notifications_dead_code;
DROP INDEX wa_outbox.notification_events_created_at;

-- == Metrics from the workers ======================================================================================
DROP TABLE wa_outbox.worker_metrics;

-- == Campaigns: steering ===========================================================================================
DROP TRIGGER notifications_park_paused_campaign ON wa_outbox.notifications;
DROP FUNCTION wa_outbox.park_paused_campaign_message();
DROP FUNCTION wa_outbox.steer_campaign(text, text, text, text);
DROP FUNCTION wa_outbox.enqueue_campaign(text, text, jsonb, text);

-- == Per recipient: pacing, order, the service window ============================================================
DROP FUNCTION wa_outbox.enqueue(text, jsonb, text, text, text, boolean);
-- enqueue() as 0002 defined it.
CREATE FUNCTION wa_outbox.enqueue(
    to_ text,
    message jsonb,
    idempotency_key text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    phone_number_id text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_problem text := coalesce(wa_outbox.recipient_problem(to_jsonb(to_)), wa_outbox.message_problem(message),
                               wa_outbox.key_problem('idempotency_key', to_jsonb(idempotency_key)),
                               wa_outbox.key_problem('correlation_id', to_jsonb(correlation_id)));
    v_recipient text := wa_outbox.recipient_digits(to_);
    v_sender text := coalesce(enqueue.phone_number_id,
                              (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id'));
    v_body jsonb;  -- the message minus the fields wa-outbox sets itself
    v_hash text;
    v_id bigint;
    v_existing_hash text;
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.phone_number_id !~ '^[0-9]{1,32}$' THEN
        RAISE EXCEPTION '`phone_number_id` must be the numeric id of a business phone number'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_sender IS NULL OR v_sender !~ '^[0-9]{1,32}$' THEN
        RAISE EXCEPTION 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_body := message - '{to,messaging_product,recipient_type}'::text[];
    -- The request digest only matters for an idempotency key (refused reuse with another message).
    v_hash := CASE WHEN idempotency_key IS NULL THEN '' ELSE md5(v_sender || '|' || v_recipient || '|' || v_body::text) END;

    INSERT INTO wa_outbox.notifications AS n
        (phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
    VALUES (v_sender, v_recipient, v_body, enqueue.idempotency_key, v_hash, enqueue.correlation_id)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING n.id INTO v_id;

    IF v_id IS NULL THEN  -- a known idempotency key
        SELECT n.id, n.request_hash INTO v_id, v_existing_hash
        FROM wa_outbox.notifications n WHERE n.idempotency_key = enqueue.idempotency_key;
        IF v_existing_hash <> v_hash THEN
            RAISE EXCEPTION 'idempotency key % was already used for a different message (id %)',
                enqueue.idempotency_key, v_id USING ERRCODE = 'unique_violation';
        END IF;
        RETURN v_id;
    END IF;

    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, correlation_id)
    VALUES (v_id, 'queued', 0, enqueue.correlation_id);
    PERFORM pg_notify('wa_outbox_notifications', '');  -- delivered at commit; wakes an idle worker at once
    RETURN v_id;
END $$;
DROP FUNCTION wa_outbox.next_in_line(bigint[]);
ALTER TABLE wa_outbox.contacts DROP COLUMN pair_paced_until;
DROP INDEX wa_outbox.notifications_due;
CREATE INDEX notifications_due ON wa_outbox.notifications (next_attempt_at) WHERE status = 'queued';
DROP INDEX wa_outbox.notifications_blocked;
DROP INDEX wa_outbox.notifications_line;
ALTER TABLE wa_outbox.notifications DROP COLUMN blocked;
ALTER TABLE wa_outbox.notifications DROP COLUMN ordered;


-- == Pacing per sender =============================================================================================
CREATE INDEX notifications_dead ON wa_outbox.notifications (id) WHERE status = 'dead';
DROP INDEX wa_outbox.notifications_dead_or_failed;
-- Version 1's take_tokens(), exactly.
-- take_tokens(): the shared token bucket. Grants up to `wanted` sends for a sender now (0 while it is paused) and
-- says when the next token will be there; creates the bucket at the default rate on first use. The row lock makes
-- concurrent workers on any number of machines share one rate.
CREATE OR REPLACE FUNCTION wa_outbox.take_tokens(sender text, wanted integer, default_mps double precision,
                                      OUT granted integer, OUT next_token_at timestamptz, OUT mps double precision)
LANGUAGE plpgsql AS $$
DECLARE
    b wa_outbox.rate_limits;
    available double precision;
    t timestamptz := clock_timestamp();
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    VALUES (sender, default_mps, greatest(1, default_mps), greatest(1, default_mps), t)
    ON CONFLICT (phone_number_id) DO NOTHING;
    SELECT * INTO b FROM wa_outbox.rate_limits r WHERE r.phone_number_id = sender FOR UPDATE;
    mps := b.mps;
    IF b.paused_until > t THEN
        granted := 0;
        next_token_at := b.paused_until;
        RETURN;
    END IF;
    available := least(b.burst, b.tokens + extract(epoch FROM t - b.refilled_at) * b.mps);
    granted := greatest(0, least(wanted, floor(available)::integer));
    UPDATE wa_outbox.rate_limits r SET tokens = available - granted, refilled_at = t
    WHERE r.phone_number_id = sender;
    next_token_at := t + make_interval(secs => greatest(0, 1 - (available - granted)) / b.mps);
END $$;
COMMENT ON COLUMN wa_outbox.rate_limits.burst IS NULL;
UPDATE wa_outbox.rate_limits SET burst = greatest(1, mps) WHERE burst IS NULL;
ALTER TABLE wa_outbox.rate_limits ALTER COLUMN burst SET NOT NULL;
DROP FUNCTION wa_outbox.bucket_shape(double precision, double precision);

-- == Campaigns: the shared shape ===================================================================================
DROP INDEX wa_outbox.notifications_campaign;
ALTER TABLE wa_outbox.notifications DROP COLUMN priority;
ALTER TABLE wa_outbox.notifications DROP COLUMN campaign_id;
DROP TABLE wa_outbox.campaigns;
