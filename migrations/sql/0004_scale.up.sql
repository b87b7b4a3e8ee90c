-- Version 4: scale. One section per concern; the down file undoes them in reverse order.

-- == Pacing per sender ============================================================================================

-- == Bulk enqueue ==================================================================================================

-- == History and retention =========================================================================================
-- prune: no index. `wa-outbox prune` walks each table's primary key over the ids created before its cutoff (found by
-- bisecting the key, as ids grow with time) and filters status and age on the rows it reads, so it never needs an
-- index of old finished rows: such an index would cover nearly all of history and cost one more entry on every
-- status change of every message, on the send path, for a job that runs once a day.

-- == Webhook ingest ================================================================================================

-- == Claim and record ==============================================================================================
SELECT 1;
