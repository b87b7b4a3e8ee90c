-- Replay an endpoint's events (wa-outbox endpoints replay, POST /v1/endpoints/<id>/replay), set-based, one statement:
--  * with `since`: every event since then that matches the endpoint's filter and that its dispatch has passed
--    (at or before its cursor: later ones are still to be dispatched, and the dispatch would insert them itself) is
--    queued again: its delivery re-queued if it has one (delivered or failed; one in flight is left to finish), or
--    inserted if it has none (an event that came before the endpoint, or whose delivery was pruned);
--  * with `failed_only`: only deliveries whose retries ran out (status 'failed'), since `since` if given.
-- A re-queued delivery keeps its attempts (numbered on in delivery_attempts) and is due at once.
-- Safe to repeat: a second run queues the same deliveries again, nothing twice (one row per endpoint and event).
WITH ep AS (
    SELECT id, event_types, cursor_txid, cursor_seq FROM wa_outbox.endpoints WHERE id = %(id)s FOR UPDATE
), requeued AS (
    UPDATE wa_outbox.deliveries d
    SET status = 'queued', next_attempt_at = now(), locked_by = NULL, locked_until = NULL, updated_at = now()
    FROM ep
    WHERE d.endpoint_id = ep.id
      AND (CASE WHEN %(failed_only)s THEN d.status = 'failed' ELSE d.status IN ('delivered', 'failed') END)
      AND (%(since)s::timestamptz IS NULL
           OR d.event_seq IN (SELECT ev.seq FROM wa_outbox.events ev WHERE ev.occurred_at >= %(since)s))
    RETURNING d.id
), inserted AS (
    INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq, phone_number_id, wa_id)
    SELECT ep.id, ev.seq, ev.phone_number_id, ev.wa_id
    FROM ep JOIN wa_outbox.events ev
      ON ev.occurred_at >= %(since)s AND (ev.txid, ev.seq) <= (ep.cursor_txid, ep.cursor_seq)
     AND (ep.event_types IS NULL OR ev.type = ANY (ep.event_types))
    WHERE NOT %(failed_only)s AND %(since)s::timestamptz IS NOT NULL
    ORDER BY ev.seq
    ON CONFLICT (endpoint_id, event_seq) DO NOTHING
    RETURNING id
)
SELECT (SELECT count(*) FROM ep) AS found, (SELECT count(*) FROM requeued) AS requeued,
       (SELECT count(*) FROM inserted) AS inserted
