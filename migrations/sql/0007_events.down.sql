-- Undo of 0007_events.up.sql, in reverse order.
DROP TABLE wa_outbox.delivery_attempts;
DROP TABLE wa_outbox.deliveries;
DROP TABLE wa_outbox.endpoints;
DROP FUNCTION wa_outbox.events_horizon();
DROP TABLE wa_outbox.events;
