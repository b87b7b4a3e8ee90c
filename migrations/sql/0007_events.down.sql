-- Undo of 0007_events.up.sql, in reverse order.
DROP TABLE wa_outbox.delivery_attempts;
DROP TABLE wa_outbox.deliveries;
DROP TABLE wa_outbox.endpoints;
DROP FUNCTION wa_outbox.events_after(text, integer, text[]);
DROP TRIGGER notification_events_emit ON wa_outbox.notification_events;
DROP FUNCTION wa_outbox.emit_message_statuses();
DROP TRIGGER webhook_events_emit ON wa_outbox.webhook_events;
DROP FUNCTION wa_outbox.emit_webhook_events();
DROP FUNCTION wa_outbox.notify_events();
DROP FUNCTION wa_outbox.event_type_of(text);
DROP FUNCTION wa_outbox.events_horizon();
DROP TABLE wa_outbox.events;
