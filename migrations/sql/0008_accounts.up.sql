-- Version 8: many numbers, business accounts and Meta apps in one deployment. The registry: Meta apps and their
-- secrets (webhook signatures), business accounts (WABAs) and the portfolio that owns them, sender numbers and
-- their access tokens. Secrets are stored encrypted with WA_OUTBOX_SECRET_KEY (Fernet tokens: a pg_dump holds
-- nothing usable) or as the name of an environment variable resolved when used (`--token-ref`), never in clear.
-- Today's single-number environment (WHATSAPP_ACCESS_TOKEN, WHATSAPP_APP_SECRET, WHATSAPP_PHONE_NUMBER_ID) is a
-- registry of one that lives in the environment, not in these tables.
-- One section per concern; each section's undo is in 0008_accounts.down.sql, in reverse order.

-- == Accounts =======================================================================================================
-- A Meta app: its secret signs the webhooks Meta sends to its callback URL.
CREATE TABLE wa_outbox.meta_apps (
    app_id      text PRIMARY KEY CHECK (app_id ~ '^[0-9]{1,32}$'),
    name        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- An app's secrets: one active (expires_at NULL), and during a rotation the previous one until its overlap ends.
CREATE TABLE wa_outbox.app_secrets (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id       text NOT NULL REFERENCES wa_outbox.meta_apps (app_id) ON DELETE CASCADE,
    secret_enc   bytea,                      -- a Fernet token under WA_OUTBOX_SECRET_KEY ...
    secret_ref   text,                       -- ... or the name of the environment variable that holds it
    fingerprint  text NOT NULL,              -- shown instead of the secret
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,                -- NULL: current; else verifies until then
    CHECK ((secret_enc IS NULL) <> (secret_ref IS NULL))
);
CREATE INDEX app_secrets_app ON wa_outbox.app_secrets (app_id);

-- A WhatsApp Business Account: it belongs to one app (its webhooks arrive signed by that app) and to one business
-- portfolio (whose messaging limit its numbers share).
CREATE TABLE wa_outbox.business_accounts (
    waba_id       text PRIMARY KEY CHECK (waba_id ~ '^[0-9]{1,32}$'),
    app_id        text NOT NULL REFERENCES wa_outbox.meta_apps (app_id),
    portfolio_id  text CHECK (portfolio_id ~ '^[0-9]{1,32}$'),
    name          text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A business phone number that sends, and the access token it sends with. Its pacing is its rate_limits row.
CREATE TABLE wa_outbox.senders (
    phone_number_id       text PRIMARY KEY CHECK (phone_number_id ~ '^[0-9]{1,32}$'),
    waba_id               text NOT NULL REFERENCES wa_outbox.business_accounts (waba_id),
    alias                 text UNIQUE CHECK (alias ~ '^[A-Za-z][A-Za-z0-9_.-]{0,63}$'),
    display_phone_number  text,
    token_enc             bytea,             -- a Fernet token under WA_OUTBOX_SECRET_KEY ...
    token_ref             text,              -- ... or the name of the environment variable that holds it
    token_fingerprint     text,
    token_updated_at      timestamptz NOT NULL DEFAULT now(),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CHECK ((token_enc IS NULL) <> (token_ref IS NULL))
);
CREATE INDEX senders_waba ON wa_outbox.senders (waba_id);

-- Every change to the registry wakes the web processes, which hold it in memory (registry_watch.py): an app added
-- or a secret rotated verifies webhooks within a second, whatever wrote it (the CLI, /v1, or plain SQL). Once per
-- statement, and Postgres folds identical notifications of one transaction into one.
CREATE FUNCTION wa_outbox.notify_registry_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('wa_outbox_registry', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER meta_apps_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.meta_apps
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();
CREATE TRIGGER app_secrets_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.app_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();
CREATE TRIGGER business_accounts_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.business_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();
CREATE TRIGGER senders_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.senders
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();

-- The app whose secret verified a webhook POST (NULL: the environment's WHATSAPP_APP_SECRET).
ALTER TABLE wa_outbox.webhook_events ADD COLUMN app_id text;
-- A change for a number (or, without one, a business account) the registry does not hold: stored and acknowledged,
-- attributed to no sender, counted and shown on /ops (webhook_routing.py). Always false without registered senders.
ALTER TABLE wa_outbox.webhook_events ADD COLUMN unregistered boolean NOT NULL DEFAULT false;
-- /ops's unregistered numbers (ops_unregistered.sql): partial, so the hot INSERT of registered changes skips it.
CREATE INDEX webhook_events_unregistered ON wa_outbox.webhook_events (received_at) WHERE unregistered;


-- == Sender at enqueue ===============================================================================================
-- A message's sender is a phone number id or a registered sender's alias, resolved by one rule (sender_choice())
-- that every enqueue function uses; with several senders registered and no default, a message must name one.
-- The sender of a message, decided in one place for every enqueue path (enqueue, enqueue_many, enqueue_checked,
-- enqueue_campaign; the Python package and the HTTP API reach them): a phone number id is taken as given (one that
-- is not registered sends with WHATSAPP_ACCESS_TOKEN, as before the registry); an alias stands for its sender's
-- number, an unknown alias is refused; none given, the default (default_sender()).
-- The sender a message that names none goes from: the one `db upgrade` recorded (WHATSAPP_PHONE_NUMBER_ID), else the
-- only registered sender when there is exactly one, else NULL.
CREATE FUNCTION wa_outbox.default_sender() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT s.value FROM wa_outbox.settings s
                     WHERE s.key = 'default_phone_number_id' AND s.value ~ '^[0-9]{1,32}$'),
                    (SELECT min(r.phone_number_id) FROM wa_outbox.senders r HAVING count(*) = 1))
$$;

-- The rule: `given` (a phone number id, an alias, or NULL) -> {phone number id, NULL} or {NULL, why it is refused}.
-- A pair rather than an exception, so a batch names the item it refuses (enqueue_many()).
CREATE FUNCTION wa_outbox.sender_choice(given text) RETURNS text[] LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN given IS NULL THEN CASE
            WHEN d.id IS NOT NULL THEN ARRAY[d.id, NULL]
            WHEN EXISTS (SELECT FROM wa_outbox.senders)
                THEN ARRAY[NULL, 'several senders are registered and no default is set: give phone_number_id or '
                                 'an alias']
            ELSE ARRAY[NULL, 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'] END
        WHEN given ~ '^[0-9]{1,32}$' THEN ARRAY[given, NULL]
        WHEN given ~ '^[A-Za-z][A-Za-z0-9_.-]{0,63}$' THEN
            coalesce((SELECT ARRAY[s.phone_number_id, NULL] FROM wa_outbox.senders s WHERE s.alias = given),
                     ARRAY[NULL, format('no sender has the alias %s: give a registered alias or a phone_number_id',
                                        given)])
        ELSE ARRAY[NULL, '`phone_number_id` must be the numeric id of a business phone number'] END
    FROM (SELECT CASE WHEN given IS NULL THEN wa_outbox.default_sender() END AS id) d
$$;

-- sender_choice() for one message: the phone number id, or invalid_parameter_value saying why not (a 400 from the
-- API, a one-line error from the CLI).
CREATE FUNCTION wa_outbox.resolve_sender(given text) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_choice text[] := wa_outbox.sender_choice(given);
BEGIN
    IF v_choice[2] IS NOT NULL THEN
        RAISE EXCEPTION '%', v_choice[2] USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_choice[1];
END $$;

CREATE OR REPLACE FUNCTION wa_outbox.enqueue(
    to_ text,
    message jsonb,
    idempotency_key text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    phone_number_id text DEFAULT NULL,
    ordered boolean DEFAULT true
) RETURNS bigint LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_problem text := coalesce(wa_outbox.recipient_problem(to_jsonb(to_)), wa_outbox.message_problem(message),
                               wa_outbox.key_problem('idempotency_key', to_jsonb(idempotency_key)),
                               wa_outbox.key_problem('correlation_id', to_jsonb(correlation_id)));
    v_recipient text := wa_outbox.recipient_digits(to_);
    v_sender text;  -- the phone number id `phone_number_id` (a number or an alias; NULL: the default) stands for
    v_body jsonb;  -- the message minus the fields wa-outbox sets itself
    v_hash text;
    v_id bigint;
    v_existing_hash text;
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_sender := wa_outbox.resolve_sender(enqueue.phone_number_id);
    v_body := message - '{to,messaging_product,recipient_type}'::text[];
    -- The request digest only matters for an idempotency key (refused reuse with another message).
    v_hash := CASE WHEN idempotency_key IS NULL THEN '' ELSE md5(v_sender || '|' || v_recipient || '|' || v_body::text) END;

    INSERT INTO wa_outbox.notifications AS n
        (phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id, ordered)
    VALUES (v_sender, v_recipient, v_body, enqueue.idempotency_key, v_hash, enqueue.correlation_id,
            coalesce(enqueue.ordered, true))
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

CREATE OR REPLACE FUNCTION wa_outbox.enqueue_many(items jsonb) RETURNS bigint[] LANGUAGE plpgsql
    SET work_mem = '64MB' AS $$
DECLARE
    -- The default sender and its verdict, once per batch (sender_choice(NULL)), not once per item.
    v_default_choice text[] := wa_outbox.sender_choice(NULL);
    v_default text := v_default_choice[1];
    -- Looked up once, not per item (a catalog look-up per row was a fifth of the statement's time).
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_json_suspect boolean;
    v_new bigint[];
    v_keys text[];
    v_hashes text[];
    v_keyed boolean;
    v_ids bigint[];
    v_conflict boolean;
BEGIN
    IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_json_suspect := wa_outbox.batch_json_suspect(items);
    -- One pass: each item is validated as it is read, and an invalid one aborts the statement (refuse_item).
    -- Ids are drawn first, so each item knows its id whether or not its row goes in (a known key does not).
    WITH input AS MATERIALIZED (  -- materialized: each field is taken out of its item once, not once per rule
        SELECT i.ord, jsonb_typeof(i.item) AS item_type, i.item->'message' AS message, i.item->'to' AS to_,
               i.item->'idempotency_key' AS key_json, i.item->'correlation_id' AS correlation_json,
               i.item->'phone_number_id' AS sender_json,
               CASE WHEN jsonb_typeof(i.item->'phone_number_id') = 'string' THEN i.item->>'phone_number_id' END
                   AS sender_text
        FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
    ), checked AS (
        SELECT ord, recipient, sender,
               CASE WHEN message ?| '{to,messaging_product,recipient_type}'
                    THEN message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE message END AS body,  -- copy the jsonb only when there is something to strip
               key_json #>> '{}' AS key, correlation_json #>> '{}' AS correlation_id,
               nextval(v_sequence) AS new_id,
               CASE
                   WHEN item_type <> 'object' THEN 'must be an object'
                   WHEN recipient IS NULL THEN wa_outbox.recipient_problem(to_)
                   ELSE coalesce(
                       wa_outbox.message_form_problem(message),
                       CASE WHEN v_json_suspect THEN wa_outbox.message_json_problem(message) END,
                       wa_outbox.key_problem('idempotency_key', key_json),
                       wa_outbox.key_problem('correlation_id', correlation_json),
                       CASE WHEN jsonb_typeof(sender_json) NOT IN ('string', 'null')
                                THEN '`phone_number_id` must be the numeric id of a business phone number'
                            -- None given: the default's verdict, known already.
                            WHEN sender_text IS NULL THEN v_default_choice[2]
                            ELSE named[2]
                       END)
               END AS problem
        FROM (SELECT *, CASE WHEN jsonb_typeof(to_) = 'string' THEN wa_outbox.recipient_digits(to_ #>> '{}') END
                            AS recipient,
                     CASE WHEN sender_text IS NULL THEN v_default ELSE named[1] END AS sender
              FROM (SELECT *,
                           -- A phone number id is sender_choice()'s own answer, without a call per item; an alias
                           -- (or anything else) asks it.
                           CASE WHEN sender_text IS NULL THEN NULL
                                WHEN sender_text ~ '^[0-9]{1,32}$' THEN ARRAY[sender_text, NULL]
                                ELSE wa_outbox.sender_choice(sender_text) END AS named
                    FROM input) named) input
    ), hashed AS (
        -- The request digest only matters for an idempotency key (409 on reuse with another message).
        SELECT *, CASE WHEN key IS NULL THEN '' ELSE md5(sender || '|' || recipient || '|' || body::text) END
                  AS request_hash
        FROM checked
    ), refused AS MATERIALIZED (
        -- The first invalid item raises here (materialized: its row is computed whatever reads it). Both inserts
        -- read this step first, so nothing is written before it.
        SELECT wa_outbox.refuse_item(ord, problem) AS refusal
        FROM (SELECT ord, problem FROM hashed WHERE problem IS NOT NULL ORDER BY ord LIMIT 1) first_invalid
    ), keyed AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, key, request_hash, correlation_id
        FROM hashed WHERE key IS NOT NULL AND NOT EXISTS (SELECT FROM refused WHERE refusal IS NOT NULL)
        ORDER BY ord  -- of two items with one key, the first goes in
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, correlation_id
    ), unkeyed AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, NULL, request_hash, correlation_id
        FROM hashed WHERE key IS NULL AND NOT EXISTS (SELECT FROM refused WHERE refusal IS NOT NULL)
        RETURNING id, correlation_id
    ), events AS (
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, correlation_id)
        SELECT id, 'queued', 0, correlation_id FROM keyed
        UNION ALL
        SELECT id, 'queued', 0, correlation_id FROM unkeyed
    )
    SELECT array_agg(new_id ORDER BY ord), array_agg(key ORDER BY ord), array_agg(request_hash ORDER BY ord),
           bool_or(key IS NOT NULL)
    INTO v_new, v_keys, v_hashes, v_keyed
    FROM hashed;

    IF v_keyed THEN
        -- A new statement, a new snapshot: rows just inserted are visible, so keyed items resolve to the stored id.
        SELECT array_agg(coalesce(n.id, t.new_id) ORDER BY t.ord),
               bool_or(n.request_hash IS DISTINCT FROM t.request_hash AND n.id IS NOT NULL)
        INTO v_ids, v_conflict
        FROM unnest(v_new, v_keys, v_hashes) WITH ORDINALITY AS t(new_id, key, request_hash, ord)
        LEFT JOIN wa_outbox.notifications n ON t.key IS NOT NULL AND n.idempotency_key = t.key;
        IF v_conflict THEN
            RAISE EXCEPTION 'an idempotency key was already used for a different message'
                USING ERRCODE = 'unique_violation';
        END IF;
    ELSE
        v_ids := v_new;
    END IF;
    PERFORM pg_notify('wa_outbox_notifications', '');
    RETURN coalesce(v_ids, '{}');
END $$;

CREATE OR REPLACE FUNCTION wa_outbox.enqueue_checked(items jsonb) RETURNS bigint[] LANGUAGE plpgsql
    SET work_mem = '64MB' AS $$
DECLARE
    v_default_choice text[] := wa_outbox.sender_choice(NULL);  -- the default sender, once per batch
    v_default text := v_default_choice[1];
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_missing bigint;
    v_new bigint[];
    v_keys text[];
    v_hashes text[];
    v_keyed boolean;
    v_ids bigint[];
    v_conflict boolean;
BEGIN
    IF v_default IS NULL THEN
        -- No default: the first item without its own sender refuses the batch (enqueue_many()'s last rule).
        SELECT i.ord INTO v_missing FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
        WHERE i.item->>'phone_number_id' IS NULL ORDER BY i.ord LIMIT 1;
        IF v_missing IS NOT NULL THEN
            PERFORM wa_outbox.refuse_item(v_missing, v_default_choice[2]);
        END IF;
    END IF;
    WITH input AS (
        -- Python checked each sender's form (digits, or an alias, which starts with a letter): the first character
        -- tells a phone number id (taken as given, as sender_choice() does) from an alias (resolve_sender()) without
        -- a regular expression per item.
        SELECT i.ord, i."to" AS recipient,
               CASE WHEN i.phone_number_id IS NULL THEN v_default
                    WHEN ascii(i.phone_number_id) BETWEEN 48 AND 57 THEN i.phone_number_id
                    ELSE wa_outbox.resolve_sender(i.phone_number_id) END AS sender,
               CASE WHEN i.message ?| '{to,messaging_product,recipient_type}'
                    THEN i.message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE i.message END AS body,  -- copy the jsonb only when there is something to strip
               i.idempotency_key AS key, i.correlation_id, nextval(v_sequence) AS new_id
        FROM ROWS FROM (jsonb_to_recordset(items) AS ("to" text, message jsonb, idempotency_key text,
                                                      correlation_id text, phone_number_id text))
             WITH ORDINALITY AS i("to", message, idempotency_key, correlation_id, phone_number_id, ord)
    ), hashed AS (
        -- The request digest only matters for an idempotency key (409 on reuse with another message).
        SELECT *, CASE WHEN key IS NULL THEN '' ELSE md5(sender || '|' || recipient || '|' || body::text) END
                  AS request_hash
        FROM input
    ), keyed AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, key, request_hash, correlation_id
        FROM hashed WHERE key IS NOT NULL
        ORDER BY ord  -- of two items with one key, the first goes in
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, correlation_id
    ), unkeyed AS (  -- no key, nothing to conflict on: a plain insert (see enqueue_many())
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, request_hash, correlation_id
        FROM hashed WHERE key IS NULL
        RETURNING id, correlation_id
    ), events AS (
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, correlation_id)
        SELECT id, 'queued', 0, correlation_id FROM keyed
        UNION ALL
        SELECT id, 'queued', 0, correlation_id FROM unkeyed
    )
    SELECT array_agg(new_id ORDER BY ord), array_agg(key ORDER BY ord), array_agg(request_hash ORDER BY ord),
           bool_or(key IS NOT NULL)
    INTO v_new, v_keys, v_hashes, v_keyed
    FROM hashed;

    IF v_keyed THEN
        -- As in enqueue_many(): a new snapshot sees the rows just inserted; a known key gives its stored id.
        SELECT array_agg(coalesce(n.id, t.new_id) ORDER BY t.ord),
               bool_or(n.request_hash IS DISTINCT FROM t.request_hash AND n.id IS NOT NULL)
        INTO v_ids, v_conflict
        FROM unnest(v_new, v_keys, v_hashes) WITH ORDINALITY AS t(new_id, key, request_hash, ord)
        LEFT JOIN wa_outbox.notifications n ON t.key IS NOT NULL AND n.idempotency_key = t.key;
        IF v_conflict THEN
            RAISE EXCEPTION 'an idempotency key was already used for a different message'
                USING ERRCODE = 'unique_violation';
        END IF;
    ELSE
        v_ids := v_new;
    END IF;
    PERFORM pg_notify('wa_outbox_notifications', '');
    RETURN coalesce(v_ids, '{}');
END $$;

CREATE OR REPLACE FUNCTION wa_outbox.enqueue_campaign(campaign_name text, phone_number_id text, items jsonb,
                                           default_sender text DEFAULT NULL)
    RETURNS TABLE (campaign_id bigint, campaign_status text, inserted integer, present integer)
    LANGUAGE plpgsql SET work_mem = '64MB' AS $$
#variable_conflict use_column
DECLARE
    v_choice text[] := wa_outbox.sender_choice(coalesce(enqueue_campaign.phone_number_id, default_sender));
    v_sender text := v_choice[1];
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_campaign wa_outbox.campaigns%ROWTYPE;
    v_json_suspect boolean;
    v_inserted integer;
BEGIN
    IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A sender named must resolve; none named, a campaign that exists already needs no default.
    IF v_sender IS NULL AND (enqueue_campaign.phone_number_id IS NOT NULL
                             OR NOT EXISTS (SELECT FROM wa_outbox.campaigns c WHERE c.name = campaign_name)) THEN
        RAISE EXCEPTION '%', v_choice[2] USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wa_outbox.campaigns AS c (name, phone_number_id) VALUES (campaign_name, v_sender)
    ON CONFLICT (name) DO NOTHING;
    -- FOR SHARE: a pause, resume or cancel waits for this chunk to commit, so it also moves the rows it adds.
    SELECT * INTO v_campaign FROM wa_outbox.campaigns c WHERE c.name = campaign_name FOR SHARE;
    IF v_campaign.status = 'cancelled' THEN
        RAISE EXCEPTION 'campaign % is cancelled: nothing more can be imported into it', campaign_name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF enqueue_campaign.phone_number_id IS NOT NULL AND v_campaign.phone_number_id <> v_sender THEN
        RAISE EXCEPTION 'campaign % sends from %, not %', campaign_name, v_campaign.phone_number_id,
            enqueue_campaign.phone_number_id USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_sender := v_campaign.phone_number_id;
    v_json_suspect := wa_outbox.batch_json_suspect(items);

    WITH input AS MATERIALIZED (  -- materialized: each field is taken out of its item once, not once per rule
        SELECT i.ord, jsonb_typeof(i.item) AS item_type, i.item->'message' AS message, i.item->'to' AS to_,
               i.item->'idempotency_key' AS key_json,
               CASE WHEN jsonb_typeof(i.item->'to') = 'string' THEN wa_outbox.recipient_digits(i.item->>'to') END
                   AS recipient
        FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
    ), checked AS (
        SELECT ord, recipient,
               CASE WHEN message ?| '{to,messaging_product,recipient_type}'
                    THEN message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE message END AS body,
               key_json #>> '{}' AS key,
               CASE
                   WHEN item_type <> 'object' THEN 'must be an object'
                   WHEN recipient IS NULL THEN wa_outbox.recipient_problem(to_)
                   WHEN jsonb_typeof(key_json) IS DISTINCT FROM 'string'
                       THEN 'a campaign message needs its idempotency_key'
                   ELSE coalesce(wa_outbox.message_form_problem(message),
                                 CASE WHEN v_json_suspect THEN wa_outbox.message_json_problem(message) END,
                                 wa_outbox.key_problem('idempotency_key', key_json))
               END AS problem
        FROM input
    ), new_rows AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, campaign_id, priority,
             next_attempt_at, ordered)
        OVERRIDING SYSTEM VALUE
        -- ordered = false: a campaign message neither waits in its recipient's line nor holds it (a paused campaign
        -- must never hold back an order confirmation to the same customer); priority already puts it behind.
        SELECT CASE WHEN problem IS NULL THEN nextval(v_sequence) ELSE wa_outbox.refuse_item(ord, problem) END,
               v_sender, recipient, body, key, md5(v_sender || '|' || recipient || '|' || body::text), v_campaign.id, 1,
               CASE WHEN v_campaign.status = 'paused' THEN 'infinity'::timestamptz ELSE now() END, false
        FROM checked ORDER BY ord
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id
    ), events AS (
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail)
        SELECT id, 'queued', 0, jsonb_build_object('campaign', campaign_name) FROM new_rows
    )
    SELECT count(*) INTO v_inserted FROM new_rows;

    IF v_inserted > 0 AND v_campaign.status = 'active' THEN
        PERFORM pg_notify('wa_outbox_notifications', '');
    END IF;
    RETURN QUERY SELECT v_campaign.id, v_campaign.status, v_inserted, jsonb_array_length(items) - v_inserted;
END $$;

-- Many senders: the claim walks the senders with queued rows in key order and takes each one's due rows, as many
-- as it has send slots for (claim_notifications.sql), so a sender with a long backlog and no free slot does not
-- hold the others back. One index range per sender and priority. (Built in this transaction: on a large table,
-- a partial index of the queued rows still reads the whole table once.)
CREATE INDEX notifications_sender_due ON wa_outbox.notifications (phone_number_id, priority, next_attempt_at)
    WHERE status = 'queued' AND NOT blocked;

-- reserve_slots_set() (issue 19's many senders): reserve_slots() for several senders at once, in one statement
-- (the claim serves many senders per batch: one function call, one UPDATE, instead of one of each per sender).
-- The same rule, for each sender of `senders` (distinct) wanting the matching count of `wants`: creates missing
-- buckets at the default rate, locks the senders' rows in key order (two claims lock the same rows in the same
-- order: no deadlocks), reads the time after the locks are taken, and writes only the schedules that granted
-- something. One row per sender, in key order.
CREATE FUNCTION wa_outbox.reserve_slots_set(senders text[], wants integer[], default_mps double precision,
                                            lead double precision, horizon double precision)
    RETURNS TABLE (phone_number_id text, granted integer, slots_from timestamptz, level double precision,
                   refill double precision, paused boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    SELECT u.s, default_mps, NULL, (wa_outbox.bucket_shape(default_mps, NULL)).capacity, clock_timestamp()
    FROM unnest(senders) AS u(s)
    WHERE NOT EXISTS (SELECT 1 FROM wa_outbox.rate_limits r WHERE r.phone_number_id = u.s)
    ORDER BY u.s
    ON CONFLICT (phone_number_id) DO NOTHING;
    RETURN QUERY
    WITH locked AS MATERIALIZED (
        SELECT r.phone_number_id AS sender, r.mps, r.burst, r.tokens, r.refilled_at, r.paused_until, u.n AS wanted
        FROM wa_outbox.rate_limits r JOIN unnest(senders, wants) AS u(s, n) ON u.s = r.phone_number_id
        ORDER BY r.phone_number_id FOR UPDATE OF r
    ), timed AS MATERIALIZED (  -- the earliest slot, read after the locks
        SELECT l.*, sh.refill AS rate, sh.capacity,
               clock_timestamp() + make_interval(secs => least(lead, 1 / sh.refill)) AS t
        FROM locked l, wa_outbox.bucket_shape(l.mps, l.burst) sh
    ), shaped AS MATERIALIZED (
        SELECT x.sender, x.rate, x.wanted, coalesce(x.paused_until > x.t, false) AS halted,
               CASE WHEN x.paused_until > x.t THEN x.paused_until ELSE x.t END AS slots_at,
               CASE WHEN x.paused_until > x.t THEN x.capacity  -- the bucket refills during the pause
                    ELSE least(x.capacity, x.tokens + extract(epoch FROM x.t - x.refilled_at) * x.rate) END AS lvl
        FROM timed x
    ), decided AS MATERIALIZED (
        -- slot k is within the horizon while (k - level) / refill <= horizon (+ 1e-9: float rounding)
        SELECT s.*, CASE WHEN s.halted THEN 0
                         ELSE greatest(0, least(s.wanted, floor(s.lvl + horizon * s.rate + 1e-9)::integer)) END AS n
        FROM shaped s
    ), moved AS (  -- an empty grant leaves the schedule as it was (see reserve_slots_ahead)
        UPDATE wa_outbox.rate_limits r SET tokens = d.lvl - d.n, refilled_at = d.slots_at
        FROM decided d WHERE r.phone_number_id = d.sender AND d.n > 0
    )
    SELECT d.sender, d.n, d.slots_at, d.lvl, d.rate, d.halted FROM decided d ORDER BY d.sender;
END $$;

-- reserve_slots() is reserve_slots_set() for one sender (one owner of the rule).
CREATE OR REPLACE FUNCTION wa_outbox.reserve_slots(sender text, wanted integer, default_mps double precision,
                                        lead double precision, horizon double precision,
                                        OUT granted integer, OUT slots_from timestamptz, OUT level double precision,
                                        OUT refill double precision, OUT paused boolean)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT g.granted, g.slots_from, g.level, g.refill, g.paused INTO granted, slots_from, level, refill, paused
    FROM wa_outbox.reserve_slots_set(ARRAY[sender], ARRAY[wanted], default_mps, lead, horizon) g;
END $$;
