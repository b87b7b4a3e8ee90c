-- Undo of 0011_number_health.up.sql, in reverse order.
-- == Enqueue (issue 23: the first hour) ==
DROP FUNCTION wa_outbox.check_message(text, text, text, text, text);

-- == Number health ==
DROP FUNCTION wa_outbox.number_restricted(jsonb, timestamptz);
DROP TABLE wa_outbox.number_health;
