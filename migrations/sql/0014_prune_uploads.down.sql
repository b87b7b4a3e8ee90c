-- Version 13's check_message_upload() (no lock on the file's row), and no index of the messages naming uploads.
DROP INDEX wa_outbox.notifications_upload;

CREATE OR REPLACE FUNCTION wa_outbox.check_message_upload() RETURNS trigger LANGUAGE plpgsql AS $$
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
