-- A registered app, locked for the transaction that changes it or hangs a business account on it (accounts.py:
-- adding, rotating, removing, adding a sender serialise on this row), with its current secret's fingerprint and
-- variable (NULL: stored encrypted).
-- No row: no such app.
SELECT a.app_id, a.name,
       (SELECT s.fingerprint FROM wa_outbox.app_secrets s
        WHERE s.app_id = a.app_id AND s.expires_at IS NULL ORDER BY s.id DESC LIMIT 1) AS fingerprint,
       (SELECT s.secret_ref FROM wa_outbox.app_secrets s
        WHERE s.app_id = a.app_id AND s.expires_at IS NULL ORDER BY s.id DESC LIMIT 1) AS secret_ref
FROM wa_outbox.meta_apps a
WHERE a.app_id = %(app_id)s
FOR UPDATE
