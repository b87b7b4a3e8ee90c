-- Version 5: speed. One section per concern; each section's undo is in 0005_speed.down.sql, in reverse order.

-- == History flatness =================================================================================================

-- == Ops queries ======================================================================================================

-- == Claim and record =================================================================================================

-- == Bulk enqueue =====================================================================================================

-- == Webhook ingest ===================================================================================================

-- == Pacing ===========================================================================================================

-- Give back the pair-pacing reservations (contacts.pair_paced_until, a generic cell rate algorithm: each claim moves
-- it one interval per message) of claimed rows that go back unsent (given back before their send slot): the
-- recipient is then not held back by a send that never happened. Called by the worker before it records the rows
-- as released, while they are still `sending` under its lease (so none can be claimed again meanwhile); rows that
-- are not are skipped. Returns how many reservations were given back.
--
-- Safe only while no other claim for that recipient came after: each claim sets the time to
-- greatest(time, its now()) + k intervals, so taking back k intervals restores what the time would have been
-- without this claim (or later: never earlier) as long as the claims since were this one's statement (same now(),
-- same updated_at on its rows) or given back too. A message to the recipient updated after the claim (claimed later,
-- or anything else: it then keeps its reservation, the safe side) means no give-back. The recipients' rows are
-- locked first, in key order as the claim locks them, and checked in a second statement: its snapshot sees every
-- claim that moved the time before the lock was taken.
CREATE FUNCTION wa_outbox.return_pair_reservations(p_ids bigint[], p_worker text, p_interval double precision)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    returned integer;
BEGIN
    IF p_interval <= 0 THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM wa_outbox.contacts c
    WHERE (c.phone_number_id, c.wa_id) IN (SELECT n.phone_number_id, n.recipient FROM wa_outbox.notifications n
                                           WHERE n.id = ANY (p_ids) AND n.status = 'sending'
                                             AND n.locked_by = p_worker)
    ORDER BY c.phone_number_id, c.wa_id
    FOR UPDATE OF c;
    WITH given AS (
        SELECT n.phone_number_id, n.recipient, count(*) AS k, min(n.updated_at) AS claimed_at
        FROM wa_outbox.notifications n
        WHERE n.id = ANY (p_ids) AND n.status = 'sending' AND n.locked_by = p_worker
        GROUP BY n.phone_number_id, n.recipient
    ), back AS (
        UPDATE wa_outbox.contacts c
        SET pair_paced_until = c.pair_paced_until - make_interval(secs => g.k * p_interval)
        FROM given g
        WHERE c.phone_number_id = g.phone_number_id AND c.wa_id = g.recipient AND c.pair_paced_until IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM wa_outbox.notifications m
                          WHERE m.recipient = g.recipient AND m.phone_number_id = g.phone_number_id
                            AND m.updated_at > g.claimed_at AND NOT (m.id = ANY (p_ids)))
        RETURNING g.k
    )
    SELECT coalesce(sum(k), 0) INTO returned FROM back;
    RETURN returned;
END
$$;

SELECT 1;
