-- The registered apps' secrets that still verify webhook signatures: each app's current one and, during a rotation,
-- the previous one until its overlap ends (registry.load). Read by the web when its registry is (re)loaded.
-- Safe to repeat: it only reads.
SELECT s.app_id, s.secret_enc, s.secret_ref, s.fingerprint, s.expires_at
FROM wa_outbox.app_secrets s
WHERE s.expires_at IS NULL OR s.expires_at > now()
ORDER BY s.app_id, s.id
