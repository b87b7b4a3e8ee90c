-- Undo version 5, in reverse order of its sections.

-- == Pacing ===========================================================================================================

-- == Webhook ingest ===================================================================================================

-- == Bulk enqueue =====================================================================================================

-- == Claim and record =================================================================================================

-- == Ops queries ======================================================================================================

-- == History flatness =================================================================================================
-- Version 4's definitions: the default fill factor (pages already written keep their layout: no rewrite).
ALTER TABLE wa_outbox.contacts RESET (fillfactor);
ALTER TABLE wa_outbox.notifications RESET (fillfactor);

SELECT 1;
