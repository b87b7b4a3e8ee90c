-- Dispatch: for every enabled endpoint, turn the events after its cursor (and below the feed's horizon,
-- events_horizon(): no event can appear behind it later) into deliveries, at most %(batch)s events per endpoint, in
-- the feed's order (txid, seq), and move its cursor past them, matching its filter or not. One statement for every
-- endpoint. Many workers may run it at once: each endpoint row is locked (SKIP LOCKED: another worker dispatches
-- that endpoint meanwhile) and (endpoint_id, event_seq) is unique, so no event is dispatched twice.
-- Inserted in the feed's order, one endpoint's deliveries have ids in that order: ordered endpoints rely on it.
-- Safe to repeat: moves each cursor only past the events it dispatched; a second run dispatches what followed.
WITH endpoint AS (
    SELECT id, event_types, cursor_txid, cursor_seq FROM wa_outbox.endpoints
    WHERE state = 'enabled'
    ORDER BY id
    FOR NO KEY UPDATE SKIP LOCKED
), horizon AS (
    SELECT wa_outbox.events_horizon() AS txid
), picked AS (
    SELECT e.id AS endpoint_id, e.event_types, ev.seq, ev.txid, ev.type, ev.phone_number_id, ev.wa_id
    FROM endpoint e CROSS JOIN horizon h
    CROSS JOIN LATERAL (
        SELECT ev.seq, ev.txid, ev.type, ev.phone_number_id, ev.wa_id FROM wa_outbox.events ev
        WHERE (ev.txid, ev.seq) > (e.cursor_txid, e.cursor_seq) AND ev.txid < h.txid
        ORDER BY ev.txid, ev.seq
        LIMIT %(batch)s
    ) ev
), inserted AS (
    INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq, phone_number_id, wa_id)
    SELECT endpoint_id, seq, phone_number_id, wa_id FROM picked
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
)
SELECT m.id AS endpoint_id, m.scanned::int AS scanned,
       (SELECT count(*) FROM inserted i WHERE i.endpoint_id = m.id)::int AS inserted
FROM moved m
