-- Version 12 (with 9-11): media both ways. An inbound image, voice note or document is fetched from Meta by the
-- workers and kept (in Postgres, or in an S3-compatible bucket: WA_OUTBOX_MEDIA_STORE); an outbound file the app
-- holds is handed over as bytes and uploaded to Meta once per sender. One section per concern; the undo is in
-- 0012_media.down.sql, in reverse order.

-- == Media ==========================================================================================================
-- One row per media object, either way. Inbound: one per media id a webhook carried (a redelivered webhook finds
-- its row and fetches nothing twice), a queue the workers drain like webhook_events. Outbound: one per file an app
-- handed over (POST /v1/media, wa_outbox.upload_media()), stored at once.
CREATE TABLE wa_outbox.media (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,   -- wa-outbox's own id
    direction        text NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    meta_media_id    text,                 -- inbound: the id as it arrived in the webhook
    phone_number_id  text,                 -- inbound: the business number that received it (its token fetches it)
    wa_id            text,                 -- inbound: the customer who sent it
    webhook_event_id bigint,               -- inbound: the message's webhook_events row
    wamid            text,                 -- inbound: the message that carried it
    kind             text CHECK (kind IN ('image', 'audio', 'video', 'document', 'sticker')),
    mime_type        text,
    filename         text,
    declared_sha256  text,                 -- as Meta said (the webhook's or the lookup's sha256)
    declared_size    bigint,               -- as Meta's lookup said (file_size)
    sha256           bytea,                -- of the bytes stored
    size             bigint CHECK (size >= 0),
    -- pending: to fetch; stored: its bytes are kept; failed: a final refusal (404, a checksum that never matched);
    -- expired: the id could no longer be fetched; too_large: refused by the size cap (recorded, never stored)
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'fetching', 'stored', 'failed', 'expired', 'too_large')),
    store            text CHECK (store IN ('postgres', 's3')),
    store_key        text,                 -- s3: the object's key under the bucket
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- inbound: Meta keeps a media id fetchable this long (7 days from the message), then the media is `expired`
    fetch_until      timestamptz,
    locked_by        text,
    locked_until     timestamptz,
    last_error       jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    stored_at        timestamptz,
    CHECK ((direction = 'inbound') = (meta_media_id IS NOT NULL))
);
CREATE UNIQUE INDEX media_meta_media_id ON wa_outbox.media (meta_media_id) WHERE direction = 'inbound';
CREATE INDEX media_due ON wa_outbox.media (next_attempt_at) WHERE state = 'pending';
CREATE INDEX media_leased ON wa_outbox.media (locked_until) WHERE state = 'fetching';
CREATE INDEX media_created_at ON wa_outbox.media (created_at);

-- The bytes of media kept in Postgres, in chunks (media_store.CHUNK_BYTES), so that neither a worker nor a web
-- process ever holds a whole file: it is written and read one chunk at a time.
CREATE TABLE wa_outbox.media_chunks (
    media_id  bigint NOT NULL REFERENCES wa_outbox.media (id) ON DELETE CASCADE,
    seq       integer NOT NULL CHECK (seq >= 0),
    data      bytea NOT NULL,
    PRIMARY KEY (media_id, seq)
);
ALTER TABLE wa_outbox.media_chunks ALTER COLUMN data SET STORAGE EXTERNAL;  -- already compressed, mostly

-- An outbound file as uploaded to Meta for one sender (POST /{phone-number-id}/media): Meta's media id, reused until
-- it expires (30 days), then uploaded again; another sender uploads its own.
CREATE TABLE wa_outbox.media_uploads (
    media_id         bigint NOT NULL REFERENCES wa_outbox.media (id) ON DELETE CASCADE,
    phone_number_id  text NOT NULL,
    meta_media_id    text NOT NULL,
    uploaded_at      timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (media_id, phone_number_id)
);

-- == Outbound media: messages naming an upload =====================================================================
-- A media message may name a file handed over to wa-outbox instead of a Meta media id or a link
-- ({"document": {"upload": 12, "filename": "invoice.pdf"}}): message_form_problem() checks its form; this trigger,
-- on every insert into the outbox (enqueue(), enqueue_many(), enqueue_checked(), campaigns), that it names a file
-- wa-outbox holds, of the kind the message sends, so a typo is refused at enqueue rather than dead at send. The WHEN
-- clause keeps every other message from calling the function.
CREATE FUNCTION wa_outbox.check_message_upload() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_kind text := wa_outbox.message_type(NEW.message);
    v_upload text := NEW.message->v_kind->>'upload';
    v_found boolean := false;
    v_media_kind text;
    v_mime_type text;
BEGIN
    IF v_kind NOT IN ('image', 'audio', 'video', 'document', 'sticker') OR v_upload IS NULL THEN
        RETURN NEW;
    END IF;
    IF v_upload ~ '^[1-9][0-9]{0,17}$' THEN
        SELECT m.kind, m.mime_type INTO v_media_kind, v_mime_type FROM wa_outbox.media m
        WHERE m.id = v_upload::bigint AND m.direction = 'outbound' AND m.state = 'stored';
        v_found := FOUND;
    END IF;
    IF NOT v_found THEN
        RAISE EXCEPTION 'unknown upload %: no file with that id was handed over (POST /v1/media, upload_media())',
            v_upload USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_media_kind IS DISTINCT FROM v_kind THEN
        RAISE EXCEPTION 'upload %, % (%), cannot be sent in a message of type %', v_upload, v_mime_type,
            coalesce(v_media_kind, 'no kind Meta sends'), quote_literal(v_kind)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER notifications_check_upload BEFORE INSERT ON wa_outbox.notifications
    FOR EACH ROW WHEN (NEW.message @? '$.*.upload') EXECUTE FUNCTION wa_outbox.check_message_upload();

-- message_form_problem() with the `upload` rules (schema.sql, Message validation).
CREATE OR REPLACE FUNCTION wa_outbox.message_form_problem(message jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(message) IS DISTINCT FROM 'object'
            THEN '`message` must be a JSON object (a Cloud API message body)'
        WHEN message ?| '{status,message_id}'
            THEN 'read receipts and typing indicators (status/message_id) are not outbound messages: '
                 'send them directly, they need no outbox'
        WHEN jsonb_typeof(message->'type') NOT IN ('string', 'null')
                OR wa_outbox.message_type(message) NOT IN ('text', 'template', 'image', 'audio', 'video', 'document',
                                                           'sticker', 'location', 'contacts', 'interactive',
                                                           'reaction')
            THEN 'unknown message type ' || (message->'type')::text || ': expected one of text, template, image, '
                 'audio, video, document, sticker, location, contacts, interactive, reaction'
        WHEN jsonb_typeof(message->wa_outbox.message_type(message)) IS DISTINCT FROM 'object'
                AND NOT (wa_outbox.message_type(message) = 'contacts' AND jsonb_typeof(message->'contacts') = 'array')
            THEN 'message of type ' || quote_literal(wa_outbox.message_type(message)) || ' needs a '
                 || quote_literal(wa_outbox.message_type(message)) || ' object'
        WHEN wa_outbox.message_type(message) = 'text'
                AND jsonb_typeof(message->'text'->'body') IS DISTINCT FROM 'string'
            THEN 'a text message needs text.body (a string of at most 4096 characters)'
        WHEN wa_outbox.message_type(message) = 'text' AND length(message->'text'->>'body') > 4096
            THEN 'text.body is ' || length(message->'text'->>'body')::text
                 || ' characters; the Cloud API allows 4096'
        WHEN jsonb_typeof(message->'biz_opaque_callback_data') NOT IN ('string', 'null')
            THEN '`biz_opaque_callback_data` must be a string'
        WHEN length(message->>'biz_opaque_callback_data') > 492
            THEN 'biz_opaque_callback_data is ' || length(message->>'biz_opaque_callback_data')::text
                 || ' characters: at most 492 fit, as Meta allows 512 and "<outbox id>:" goes first'
        -- A media message may name a file handed over to wa-outbox (POST /v1/media, upload_media()) instead of
        -- Meta's media id or a public link: {"document": {"upload": 12, "filename": "invoice.pdf"}} (0012_media).
        WHEN wa_outbox.message_type(message) IN ('image', 'audio', 'video', 'document', 'sticker')
                AND message->wa_outbox.message_type(message) ? 'upload'
                AND (jsonb_typeof(message->wa_outbox.message_type(message)->'upload') IS DISTINCT FROM 'number'
                     OR (message->wa_outbox.message_type(message)->>'upload') !~ '^[1-9][0-9]{0,17}$')
            THEN wa_outbox.message_type(message) || '.upload must be the id POST /v1/media or upload_media() '
                 'returned (a positive integer)'
        WHEN wa_outbox.message_type(message) IN ('image', 'audio', 'video', 'document', 'sticker')
                AND message->wa_outbox.message_type(message) ? 'upload'
                AND message->wa_outbox.message_type(message) ?| '{id,link}'
            THEN wa_outbox.message_type(message) || '.upload stands for ' || wa_outbox.message_type(message)
                 || '.id and ' || wa_outbox.message_type(message) || '.link: give only one of the three'
        WHEN octet_length(message::text) > 65536
            THEN 'message is larger than 65536 bytes'
    END
$$;
