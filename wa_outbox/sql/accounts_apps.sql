-- The registered apps (`apps list | show`, GET /v1/apps): each with its current secret's fingerprint and source
-- (secret_ref: the variable's name; NULL: stored encrypted), the previous secret still verifying during a rotation,
-- and the business accounts and senders that belong to it. Never a secret. app_id NULL: every app.
-- Safe to repeat: it only reads.
SELECT a.app_id, a.name, cur.fingerprint AS secret_fingerprint, cur.secret_ref, cur.created_at AS secret_updated_at,
       prev.fingerprint AS previous_fingerprint, prev.expires_at AS previous_expires_at,
       coalesce((SELECT array_agg(b.waba_id ORDER BY b.waba_id) FROM wa_outbox.business_accounts b
                 WHERE b.app_id = a.app_id), '{}') AS business_accounts,
       (SELECT count(*) FROM wa_outbox.senders s JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
        WHERE b.app_id = a.app_id) AS senders,
       a.created_at, a.updated_at
FROM wa_outbox.meta_apps a
LEFT JOIN LATERAL (SELECT s.fingerprint, s.secret_ref, s.created_at FROM wa_outbox.app_secrets s
                   WHERE s.app_id = a.app_id AND s.expires_at IS NULL ORDER BY s.id DESC LIMIT 1) cur ON true
LEFT JOIN LATERAL (SELECT s.fingerprint, s.expires_at FROM wa_outbox.app_secrets s
                   WHERE s.app_id = a.app_id AND s.expires_at > now() ORDER BY s.expires_at DESC LIMIT 1) prev ON true
WHERE %(app_id)s::text IS NULL OR a.app_id = %(app_id)s
ORDER BY a.app_id
