-- An app's first secret (accounts.add_app): encrypted (secret_enc) or the name of the variable holding it.
INSERT INTO wa_outbox.app_secrets (app_id, secret_enc, secret_ref, fingerprint)
VALUES (%(app_id)s, %(secret_enc)s, %(secret_ref)s, %(fingerprint)s)
