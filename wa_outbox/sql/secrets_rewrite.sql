-- `secrets rotate-key`: write back every secret re-encrypted under the first key (the same secrets: fingerprints and
-- token_updated_at stay), one statement per run, in the transaction that read them (secrets_stored.sql). Returns
-- how many rows of each table were rewritten.
WITH apps AS (
    UPDATE wa_outbox.app_secrets s SET secret_enc = v.enc
    FROM unnest(%(app_ids)s::bigint[], %(app_encs)s::bytea[]) AS v (id, enc)
    WHERE s.id = v.id
    RETURNING 1
), senders AS (
    UPDATE wa_outbox.senders s SET token_enc = v.enc
    FROM unnest(%(sender_ids)s::text[], %(sender_encs)s::bytea[]) AS v (id, enc)
    WHERE s.phone_number_id = v.id
    RETURNING 1
), endpoints AS (
    UPDATE wa_outbox.endpoints e SET secret_enc = v.enc, previous_secret_enc = v.previous_enc
    FROM unnest(%(endpoint_ids)s::text[], %(endpoint_encs)s::bytea[], %(endpoint_previous_encs)s::bytea[])
         AS v (id, enc, previous_enc)
    WHERE e.id = v.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM apps) AS app_secrets, (SELECT count(*) FROM senders) AS senders,
       (SELECT count(*) FROM endpoints) AS endpoints
