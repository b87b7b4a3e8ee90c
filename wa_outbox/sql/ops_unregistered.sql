-- The ops page: webhook changes stored in the last 24 hours for numbers (or, for changes without one, business
-- accounts) the registry did not hold and still does not, grouped: what to register (`wa-outbox senders add`) or to
-- unsubscribe. Reads the partial index webhook_events_unregistered only: registered changes are not in it.
-- Safe to repeat: a read.
SELECT e.phone_number_id, e.account_id AS waba_id, e.app_id, count(*) AS updates, max(e.received_at) AS last_received
FROM wa_outbox.webhook_events e
WHERE e.unregistered AND e.received_at > now() - interval '24 hours'
  AND NOT EXISTS (SELECT 1 FROM wa_outbox.senders s WHERE s.phone_number_id = e.phone_number_id)
  AND (e.phone_number_id IS NOT NULL
       OR NOT EXISTS (SELECT 1 FROM wa_outbox.business_accounts b WHERE b.waba_id = e.account_id))
GROUP BY e.phone_number_id, e.account_id, e.app_id
ORDER BY last_received DESC
LIMIT %(limit)s
