-- Undo version 5, in reverse order of its sections.

-- == Pacing ===========================================================================================================

-- == Webhook ingest ===================================================================================================
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN dedup_key TYPE text;  -- the database's collation again
DROP INDEX wa_outbox.webhook_events_wamid;
CREATE INDEX webhook_events_wamid ON wa_outbox.webhook_events (wamid) WHERE wamid IS NOT NULL;

-- == Bulk enqueue =====================================================================================================

-- == Claim and record =================================================================================================

-- == Ops queries ======================================================================================================

-- == History flatness =================================================================================================

SELECT 1;
