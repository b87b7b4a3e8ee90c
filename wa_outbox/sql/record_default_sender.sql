-- The sender SQL-side enqueue() uses when the caller names none (from WHATSAPP_PHONE_NUMBER_ID).
-- Safe to repeat: an upsert of the same value.
INSERT INTO wa_outbox.settings (key, value) VALUES ('default_phone_number_id', %(phone_number_id)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()
