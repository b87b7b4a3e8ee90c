-- Schema 0016: the deliveries claim (claim_deliveries.sql) takes each endpoint's due deliveries in the order
-- (next_attempt_at, id); with id in deliveries_due it reads as many index entries as it claims, where it read and
-- sorted the endpoint's whole backlog on every claim. The index is partial (queued deliveries only), but its build
-- reads the whole deliveries table once: deliveries wait for it (claims, records, dispatch), sends and webhooks do not.
DROP INDEX wa_outbox.deliveries_due;
CREATE INDEX deliveries_due ON wa_outbox.deliveries (endpoint_id, next_attempt_at, id) WHERE status = 'queued';
