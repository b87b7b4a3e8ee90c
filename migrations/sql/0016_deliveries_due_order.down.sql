-- Version 15's deliveries_due, without id.
DROP INDEX wa_outbox.deliveries_due;
CREATE INDEX deliveries_due ON wa_outbox.deliveries (endpoint_id, next_attempt_at) WHERE status = 'queued';
