-- Rotate an app's secret (accounts.rotate_app_secret, on the locked app): the new one becomes current, the one it
-- replaces keeps verifying for the overlap (0: it stops now and is deleted), and any older one still in an overlap
-- is deleted, so at most two secrets verify at once (a secret rotated out twice is never trusted again). The CTEs
-- see one snapshot: the DELETE takes previous secrets (or, with no overlap, the current one too), the UPDATE the
-- current one, the INSERT adds a row neither sees.
WITH dropped AS (
    DELETE FROM wa_outbox.app_secrets
    WHERE app_id = %(app_id)s AND (expires_at IS NOT NULL OR %(overlap_seconds)s <= 0)
    RETURNING id
), kept AS (
    UPDATE wa_outbox.app_secrets SET expires_at = now() + make_interval(secs => %(overlap_seconds)s)
    WHERE app_id = %(app_id)s AND expires_at IS NULL AND %(overlap_seconds)s > 0
    RETURNING fingerprint, expires_at
), added AS (
    INSERT INTO wa_outbox.app_secrets (app_id, secret_enc, secret_ref, fingerprint)
    VALUES (%(app_id)s, %(secret_enc)s, %(secret_ref)s, %(fingerprint)s)
    RETURNING id
), touched AS (
    UPDATE wa_outbox.meta_apps SET updated_at = now() WHERE app_id = %(app_id)s RETURNING app_id
)
SELECT (SELECT fingerprint FROM kept LIMIT 1) AS previous_fingerprint,
       (SELECT expires_at FROM kept LIMIT 1) AS previous_expires_at,
       (SELECT count(*) FROM dropped) AS dropped, (SELECT count(*) FROM added) AS added,
       (SELECT count(*) FROM touched) AS touched
