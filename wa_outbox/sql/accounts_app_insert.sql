-- Register a Meta app (accounts.add_app); no row back: it is registered already (the caller then compares secrets).
-- Safe to repeat: an insert that does nothing when the app exists.
INSERT INTO wa_outbox.meta_apps (app_id, name) VALUES (%(app_id)s, %(name)s)
ON CONFLICT (app_id) DO NOTHING
RETURNING app_id
