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
