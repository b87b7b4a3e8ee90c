-- Version 5: speed. One section per concern; each section's undo is in 0005_speed.down.sql, in reverse order.

-- == History flatness =================================================================================================

-- == Ops queries ======================================================================================================

-- == Claim and record =================================================================================================

-- == Bulk enqueue =====================================================================================================

-- == Webhook ingest ===================================================================================================
-- Every stored update entered webhook_events_wamid, but its only reader (settle_unknown.sql) looks up status events
-- that are not done: partial on those, an inbound message never enters it and a processed status's new row version
-- does not either, so the hot INSERT writes one index entry fewer per message and the index stays small. Rebuilding it
-- locks the table against writes for the time it takes (README, Deploy).
DROP INDEX wa_outbox.webhook_events_wamid;
CREATE INDEX webhook_events_wamid ON wa_outbox.webhook_events (wamid) WHERE kind = 'status' AND status <> 'done';

-- == Pacing ===========================================================================================================

SELECT 1;
