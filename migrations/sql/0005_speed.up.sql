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
-- Dedup keys compared byte by byte: every stored update probes and enters the unique index on dedup_key, and under the
-- database's collation each comparison was a strcoll() (slow under the usual en_US.UTF-8). A key is only ever matched
-- for equality (and sorted for lock order), so the order does not matter; equality is the same under every
-- deterministic collation. Same type, so the table is not rewritten: only that index is rebuilt (locking the table).
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN dedup_key TYPE text COLLATE "C";

-- == Pacing ===========================================================================================================

SELECT 1;
