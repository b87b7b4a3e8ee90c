-- The endpoint registered for a URL, with its encrypted secret (wa-outbox events listen reuses the endpoint it made for
-- its own address, and verifies deliveries with its secret; the secret is never printed). An enabled one first.
-- Safe to repeat: a read.
SELECT id, state, secret_enc
FROM wa_outbox.endpoints
WHERE url = %(url)s
ORDER BY state = 'enabled' DESC, created_at, id
LIMIT 1
