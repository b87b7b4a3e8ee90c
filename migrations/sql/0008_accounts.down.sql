-- Undo of 0008_accounts.up.sql, in reverse order.
DROP INDEX wa_outbox.notifications_sender_due;
ALTER TABLE wa_outbox.webhook_events DROP COLUMN app_id;
DROP TABLE wa_outbox.senders;
DROP TABLE wa_outbox.business_accounts;
DROP TABLE wa_outbox.app_secrets;
DROP TABLE wa_outbox.meta_apps;
