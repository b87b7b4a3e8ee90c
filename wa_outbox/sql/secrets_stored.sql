-- Every secret stored encrypted (secret_box.py), for `secrets rotate-key` (under secrets_rotate_lock): the apps'
-- secrets, the senders' tokens, and the endpoints' signing secrets with the previous one of a rotation. `holder` is
-- the table, `id` its key as text. The names of --…-ref variables are not secrets and are not here.
SELECT 'app_secrets' AS holder, id::text AS id, secret_enc AS enc, NULL::bytea AS previous_enc
FROM wa_outbox.app_secrets WHERE secret_enc IS NOT NULL
UNION ALL
SELECT 'senders', phone_number_id, token_enc, NULL FROM wa_outbox.senders WHERE token_enc IS NOT NULL
UNION ALL
SELECT 'endpoints', id, secret_enc, previous_secret_enc FROM wa_outbox.endpoints
ORDER BY 1, 2
