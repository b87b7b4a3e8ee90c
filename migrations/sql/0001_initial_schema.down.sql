-- Undo version 1. The schema itself stays: alembic keeps its version table in it.
DROP VIEW IF EXISTS wa_outbox.queue_health;
DROP VIEW IF EXISTS wa_outbox.notification_timeline;
DROP FUNCTION IF EXISTS wa_outbox.enqueue(text, jsonb, text, text, text);
DROP FUNCTION IF EXISTS wa_outbox.enqueue_many(jsonb);
DROP FUNCTION IF EXISTS wa_outbox.refuse_item(bigint, text);
DROP FUNCTION IF EXISTS wa_outbox.take_tokens(text, integer, double precision);
DROP FUNCTION IF EXISTS wa_outbox.status_rank(text);
DROP TABLE IF EXISTS wa_outbox.workers;
DROP TABLE IF EXISTS wa_outbox.rate_limits;
DROP TABLE IF EXISTS wa_outbox.contacts;
DROP TABLE IF EXISTS wa_outbox.webhook_events;
DROP TABLE IF EXISTS wa_outbox.notification_events;  -- DROP is not DELETE: the append-only trigger does not fire
DROP FUNCTION IF EXISTS wa_outbox.refuse_timeline_change();
DROP TABLE IF EXISTS wa_outbox.notifications;
DROP TABLE IF EXISTS wa_outbox.settings;
