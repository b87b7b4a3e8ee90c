-- Dispatch: for every enabled endpoint, turn the events after its cursor (and below the feed's horizon,
-- events_horizon(): no event can appear behind it later) into deliveries, at most %(batch)s events per endpoint, in
-- the feed's order (txid, seq), and move its cursor past them, matching its filter or not. One statement for every
-- endpoint. Many workers may run it at once: each endpoint row is locked (SKIP LOCKED: another worker dispatches
-- that endpoint meanwhile) and (endpoint_id, event_seq) is unique, so no event is dispatched twice.
-- Inserted in the feed's order, one endpoint's deliveries have ids in that order: ordered endpoints rely on it.
-- Back-pressure: an endpoint with %(backlog)s deliveries already due and waiting for a delivery thread is skipped;
-- its events wait in the feed (its cursor holds them, and wa_outbox_deliveries_lag_seconds shows the wait) rather
-- than as rows written long before a thread can take them. Retries not yet due and held rows of ordered endpoints
-- do not count: a failing receiver or one stuck conversation never stops the dispatch of the rest.
-- Safe to repeat: moves each cursor only past the events it dispatched; a second run dispatches what followed.
-- Deliveries written: NOTIFY wa_outbox_deliveries (at commit, once; payload %(by)s, the dispatching worker), so that
-- every other worker's delivery loop claims them now: without it, a worker that found nothing to claim while another
-- dispatched slept until its next poll.
WITH horizon AS (
    SELECT wa_outbox.events_horizon() AS txid
), endpoint AS (  -- only endpoints with something to dispatch are locked: an idle poll writes nothing
    SELECT e.id, e.event_types, e.ordered, e.cursor_txid, e.cursor_seq FROM wa_outbox.endpoints e, horizon h
    WHERE e.state = 'enabled' AND EXISTS (
        SELECT 1 FROM wa_outbox.events ev WHERE (ev.txid, ev.seq) > (e.cursor_txid, e.cursor_seq) AND ev.txid < h.txid)
      -- deliveries_due, at most backlog entries. In its order: unordered, a LIMIT made the planner expect the due
      -- rows spread through the table and scan it from the start (5 ms a dispatch at 15,000 rows; bench/deliveries.py)
      AND (SELECT count(*) FROM (SELECT 1 FROM wa_outbox.deliveries d
                                 WHERE d.endpoint_id = e.id AND d.status = 'queued' AND d.next_attempt_at <= now()
                                 ORDER BY d.next_attempt_at, d.id
                                 LIMIT %(backlog)s) due) < %(backlog)s
    ORDER BY e.id
    FOR NO KEY UPDATE OF e SKIP LOCKED
), picked AS (
    SELECT e.id AS endpoint_id, e.event_types, e.ordered, ev.seq, ev.txid, ev.type, ev.phone_number_id, ev.wa_id
    FROM endpoint e CROSS JOIN horizon h
    CROSS JOIN LATERAL (
        SELECT ev.seq, ev.txid, ev.type, ev.phone_number_id, ev.wa_id FROM wa_outbox.events ev
        WHERE (ev.txid, ev.seq) > (e.cursor_txid, e.cursor_seq) AND ev.txid < h.txid
        ORDER BY ev.txid, ev.seq
        LIMIT %(batch)s
    ) ev
), inserted AS (
    INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq, phone_number_id, wa_id, next_attempt_at)
    SELECT endpoint_id, seq, phone_number_id, wa_id,
           -- ordered: behind an earlier delivery of its conversation (in this batch or still undelivered), it is
           -- held out of the claim's way until that one ends (record_deliveries.sql wakes it)
           CASE WHEN ordered AND phone_number_id IS NOT NULL AND wa_id IS NOT NULL AND (
                     row_number() OVER (PARTITION BY endpoint_id, phone_number_id, wa_id ORDER BY txid, seq) > 1
                     OR EXISTS (SELECT 1 FROM wa_outbox.deliveries p
                                WHERE p.endpoint_id = picked.endpoint_id AND p.phone_number_id = picked.phone_number_id
                                  AND p.wa_id = picked.wa_id AND p.status IN ('queued', 'delivering')))
                THEN 'infinity'::timestamptz ELSE now() END
    FROM picked
    WHERE event_types IS NULL OR type = ANY (event_types)
    ORDER BY endpoint_id, txid, seq
    ON CONFLICT (endpoint_id, event_seq) DO NOTHING
    RETURNING endpoint_id
), last AS (
    SELECT DISTINCT ON (endpoint_id) endpoint_id, txid, seq, count(*) OVER (PARTITION BY endpoint_id) AS scanned
    FROM picked
    ORDER BY endpoint_id, txid DESC, seq DESC
), moved AS (
    UPDATE wa_outbox.endpoints en SET cursor_txid = last.txid, cursor_seq = last.seq
    FROM last WHERE en.id = last.endpoint_id
    RETURNING en.id, last.scanned
), woken AS (
    SELECT pg_notify('wa_outbox_deliveries', %(by)s) FROM (SELECT FROM inserted LIMIT 1) any_inserted
)
SELECT m.id AS endpoint_id, m.scanned::int AS scanned,
       (SELECT count(*) FROM inserted i WHERE i.endpoint_id = m.id)::int AS inserted
FROM moved m, (SELECT count(*) FROM woken) notified  -- (a SELECT in WITH runs only where it is read)
