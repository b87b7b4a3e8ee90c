-- Undo of 0012_media.up.sql, in reverse order.
-- Outbound media (mediaout): message_form_problem() as 0008 left it, the upload trigger.
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
        WHEN octet_length(message::text) > 65536
            THEN 'message is larger than 65536 bytes'
    END
$$;
DROP TRIGGER notifications_check_upload ON wa_outbox.notifications;
DROP FUNCTION wa_outbox.check_message_upload();

DROP TABLE wa_outbox.media_uploads;
DROP TABLE wa_outbox.media_chunks;
DROP TABLE wa_outbox.media;
