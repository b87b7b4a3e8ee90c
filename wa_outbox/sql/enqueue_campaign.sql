-- One chunk of a campaign import (wa-outbox campaign import): finds or creates the campaign by name and inserts the
-- chunk's messages with its id and priority 1, in one statement (wa_outbox.enqueue_campaign). Items carry keys
-- derived from the campaign name and the row, so a known row inserts nothing and counts as present.
-- Safe to repeat: every item has an idempotency key; a second run inserts nothing (its counts say "present").
SELECT campaign_id, campaign_status, inserted, present
FROM wa_outbox.enqueue_campaign(%(name)s, %(phone_number_id)s, %(items)s::jsonb, %(default_sender)s)
