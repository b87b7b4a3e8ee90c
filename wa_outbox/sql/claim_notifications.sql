-- Claim up to %(limit)s due messages for one worker, in one statement:
--  * walk the senders that have queued rows round the circle, from the one after %(after)s (where this worker's
--    last claim stopped: worker/_sender.py next_walk_start), and take each one's due rows, transactional
--    (priority 0) before campaign (1), each by next_attempt_at, skipping rows other workers hold: its share of the
--    batch while other senders wait (at most %(limit)s / 40 and its slots within 0.1 s), so a sender with a long
--    backlog and no free slot holds no one back and its rows are not read (many senders, issue 19); round the whole
--    circle with room left, as many as there is room for. One index descent per sender walked, one index range per
--    sender and priority (notifications_sender_due), read lazily: rows not yet due are never read, parked followers
--    are not in the index: O(batch + senders walked). Each range has its own LIMIT: the planner does not carry the
--    outer LIMIT into these locking subqueries, and once history makes the table big it reads and sorts every due
--    row instead of walking the index (bench/history.py);
--  * the 24-hour window (%(enforce_window)s): a non-template message to a recipient who has not written in 24 h
--    (or never, as far as wa-outbox knows) goes `dead` (outside_service_window) instead of into a certain 131047;
--  * order per recipient: an ordered message with an earlier unfinished one in its line (same sender and recipient)
--    is parked (`blocked`) until the statement that finishes that one releases it (wa_outbox.next_in_line);
--  * pair pacing: per recipient at most %(pair_burst)s at once, then one per %(pair_interval)s s (contacts.
--    pair_paced_until, a generic cell rate algorithm), and nothing while a 131056 pause lasts: such rows wait for
--    their time without burning an attempt;
--  * reserve send slots for the rest from each sender's shared schedule (wa_outbox.reserve_slots_set: the senders
--    whose rate_limits row the walk locked in one call, `held`, which locks nothing again; any other in a second;
--    a sender whose row another claim holds is passed over instead of waited for: slots 1/rate apart, from
--    %(lead)s s to %(lead)s + %(horizon)s s ahead, none while the sender is paused); rows over the grant wait until
--    their slot would come within the horizon. A sender in %(reserved)s (a JSON array of
--    reserve_slots_ahead.sql's rows) had its slots reserved by this worker just before, in a transaction of its own:
--    the claim uses that grant and takes no lock on its rate_limits row (held to the commit, it would make the
--    claims of all workers for that sender run one at a time);
--  * the messaging limit of the senders' business portfolios (portfolios, set: nothing read when none is): a row
--    that would count (wa_outbox.counts_against_limit: a template to a customer with no open window, not counted
--    in the last 24 hours) takes one unit of its portfolio, each new customer once, in the batch's order; a
--    customer with none left is held (hold_reason 'messaging_limit', a `limit_held` timeline row, no attempt
--    spent) until the oldest unit frees (wa_outbox.next_unit_frees). Each portfolio's row is locked for its count
--    (FOR UPDATE: a claim for the same portfolio waits, then reads the new `used`), its freed units deleted;
--  * the rest become `sending` with this worker's lease (counted from their slot), one attempt counted and a
--    `sending` timeline event (with the slot); their recipients' pacing moves on. Each row comes back with its
--    slot, `send_at` (seconds since the epoch, the database's clock): the worker sends it then, not before.
WITH RECURSIVE ahead AS (  -- slots reserved just before (reserve_slots_ahead.sql)
    SELECT * FROM jsonb_to_recordset(%(reserved)s::jsonb)
        AS a(phone_number_id text, granted integer, slots_from timestamptz, level double precision,
             refill double precision, paused boolean)
), walk (sender, wrapped, slots, share, total, held) AS (
    -- The senders with queued rows, in key order from the one after %(after)s round to %(after)s itself (one index
    -- descent each), with the slots each could get now: its grant reserved just before, else its schedule as
    -- reserve_slots() reads it (without a lock: an estimate; the grant below decides). Each may take `share` rows:
    -- at most %(limit)s / 40, and no more than its slots within 0.1 s (`soon`: a claimed row holds one of its worker's
    -- places until its slot, worker/_sender.py claim_room, so a slow sender's rows would hold places the others could
    -- use). The walk stops once the shares fill the batch, so one claim serves many senders and the next goes on from
    -- there; a sender with no slot soon is passed over and its rows are not read. The share trades the walk's cost
    -- for fairness: each sender walked costs a key descent and a slot reservation, and a claim of 128 serves about
    -- 128 / share senders, so the circle of senders takes share-times fewer claims to go round. bench/senders.py
    -- (1,000 senders, 2 x 128 threads, 2026-12-07): limit / 64 (2 rows): 0.87-0.93 of one sender's rate, every
    -- sender's first claim within 0.41 s; / 40 (3): 0.93-0.95, 0.62 s; / 32 (4): 0.95, 0.77 s. `held`: the walk
    -- took the sender's rate_limits row lock (to the commit): the candidates and the slot reservation below do not
    -- take it again.
    SELECT f.sender, f.wrapped, q.slots, sh.share, sh.share, lk.got IS NOT NULL
    FROM (SELECT coalesce(up.sender, (SELECT n.phone_number_id FROM wa_outbox.notifications n
                                      WHERE n.status = 'queued' AND NOT n.blocked
                                      ORDER BY n.phone_number_id LIMIT 1)) AS sender,
                 up.sender IS NULL AS wrapped  -- none after %(after)s: from the first
          FROM (SELECT (SELECT n.phone_number_id FROM wa_outbox.notifications n
                        WHERE n.status = 'queued' AND NOT n.blocked AND n.phone_number_id > %(after)s
                        ORDER BY n.phone_number_id LIMIT 1) AS sender OFFSET 0) up
          OFFSET 0) f  -- OFFSET 0: computed once, not once per use
    CROSS JOIN LATERAL (
        SELECT coalesce(a.granted, b.slots, %(limit)s) AS slots, coalesce(a.granted, b.soon, %(limit)s) AS soon,
               a.granted IS NULL AND b.slots IS NOT NULL AS own  -- its schedule is the claim's to lock
        FROM (SELECT (SELECT a.granted FROM ahead a WHERE a.phone_number_id = f.sender LIMIT 1) AS granted) a
        LEFT JOIN LATERAL (
            SELECT CASE WHEN r.paused_until > now() THEN 0
                        ELSE least(%(limit)s, greatest(0, floor(l.level + %(horizon)s * sh.refill + 1e-9)))::integer
                   END AS slots,
                   CASE WHEN r.paused_until > now() THEN 0
                        ELSE least(%(limit)s, greatest(0, floor(l.level + 0.1 * sh.refill + 1e-9)))::integer
                   END AS soon
            FROM wa_outbox.rate_limits r,
                 LATERAL (SELECT wa_outbox.bucket_refill(r.mps, r.burst) AS refill,
                                 wa_outbox.bucket_capacity(r.mps, r.burst) AS capacity) sh,
                 LATERAL (SELECT least(sh.capacity, r.tokens + extract(epoch FROM now() - r.refilled_at) * sh.refill)
                          AS level) l
            WHERE r.phone_number_id = f.sender) b ON true
        OFFSET 0) q
    -- a sender another claim holds is passed over here, not counted: its rows are that claim's (SKIP LOCKED below),
    -- and counting its share left this batch short (two workers' walks often cross)
    LEFT JOIN LATERAL (SELECT true AS got FROM wa_outbox.rate_limits r WHERE r.phone_number_id = f.sender AND q.own
                       AND q.soon > 0 FOR UPDATE SKIP LOCKED) lk ON true
    CROSS JOIN LATERAL (SELECT CASE WHEN q.own AND q.soon > 0 AND lk.got IS NULL THEN 0
                                    ELSE least(q.soon, greatest(1, %(limit)s / 40)) END AS share) sh
    WHERE f.sender IS NOT NULL
    UNION ALL
    SELECT nx.sender, nx.wrapped, q.slots, sh.share, w.total + sh.share, lk.got IS NOT NULL
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT coalesce(up.sender, CASE WHEN NOT w.wrapped AND %(after)s <> '' THEN (
                   SELECT n.phone_number_id FROM wa_outbox.notifications n
                   WHERE n.status = 'queued' AND NOT n.blocked ORDER BY n.phone_number_id LIMIT 1) END) AS sender,
               w.wrapped OR up.sender IS NULL AS wrapped
        FROM (SELECT (SELECT n.phone_number_id FROM wa_outbox.notifications n
                      WHERE n.status = 'queued' AND NOT n.blocked AND n.phone_number_id > w.sender
                      ORDER BY n.phone_number_id LIMIT 1) AS sender OFFSET 0) up OFFSET 0) nx
    CROSS JOIN LATERAL (
        SELECT coalesce(a.granted, b.slots, %(limit)s) AS slots, coalesce(a.granted, b.soon, %(limit)s) AS soon,
               a.granted IS NULL AND b.slots IS NOT NULL AS own  -- its schedule is the claim's to lock
        FROM (SELECT (SELECT a.granted FROM ahead a WHERE a.phone_number_id = nx.sender LIMIT 1) AS granted) a
        LEFT JOIN LATERAL (
            SELECT CASE WHEN r.paused_until > now() THEN 0
                        ELSE least(%(limit)s, greatest(0, floor(l.level + %(horizon)s * sh.refill + 1e-9)))::integer
                   END AS slots,
                   CASE WHEN r.paused_until > now() THEN 0
                        ELSE least(%(limit)s, greatest(0, floor(l.level + 0.1 * sh.refill + 1e-9)))::integer
                   END AS soon
            FROM wa_outbox.rate_limits r,
                 LATERAL (SELECT wa_outbox.bucket_refill(r.mps, r.burst) AS refill,
                                 wa_outbox.bucket_capacity(r.mps, r.burst) AS capacity) sh,
                 LATERAL (SELECT least(sh.capacity, r.tokens + extract(epoch FROM now() - r.refilled_at) * sh.refill)
                          AS level) l
            WHERE r.phone_number_id = nx.sender) b ON true
        OFFSET 0) q
    LEFT JOIN LATERAL (SELECT true AS got FROM wa_outbox.rate_limits r WHERE r.phone_number_id = nx.sender AND q.own
                       AND q.soon > 0 FOR UPDATE SKIP LOCKED) lk ON true
    CROSS JOIN LATERAL (SELECT CASE WHEN q.own AND q.soon > 0 AND lk.got IS NULL THEN 0
                                    ELSE least(q.soon, greatest(1, %(limit)s / 40)) END AS share) sh
    WHERE w.total < %(limit)s AND nx.sender IS NOT NULL
      AND NOT (nx.wrapped AND (nx.sender > %(after)s OR %(after)s = ''))
), lap AS (  -- the whole circle walked with room left in the batch
    SELECT max(w.total) < %(limit)s AS whole FROM walk w
), candidates AS (  -- in walk order, each sender's due rows, its share (or all its slots), up to %(limit)s in all
    SELECT c.* FROM walk w
    CROSS JOIN lap
    -- a sender another claim is reserving slots for right now is left to it (its slots are going anyway); one the
    -- walk locked is ours already
    LEFT JOIN LATERAL (SELECT true AS free FROM wa_outbox.rate_limits r WHERE r.phone_number_id = w.sender
                       AND NOT w.held AND w.sender NOT IN (SELECT a.phone_number_id FROM ahead a)
                       FOR UPDATE SKIP LOCKED) mine ON true
    -- round the whole circle with room left: as many due rows as the batch has room for (the rows over a sender's
    -- slots are put back until their slot, paused ones until the pause ends: read once, not at every claim)
    CROSS JOIN LATERAL (SELECT CASE WHEN lap.whole THEN %(limit)s ELSE w.share END AS slots) q
    CROSS JOIN LATERAL (
        SELECT * FROM (SELECT n.id, n.phone_number_id, n.recipient, n.ordered, n.priority, n.next_attempt_at,
                              n.message
                       FROM wa_outbox.notifications n
                       WHERE n.phone_number_id = w.sender AND n.status = 'queued' AND NOT n.blocked
                         AND n.priority = 0 AND n.next_attempt_at <= now()
                       ORDER BY n.next_attempt_at LIMIT q.slots FOR UPDATE SKIP LOCKED) p0
        UNION ALL
        SELECT * FROM (SELECT n.id, n.phone_number_id, n.recipient, n.ordered, n.priority, n.next_attempt_at,
                              n.message
                       FROM wa_outbox.notifications n
                       WHERE n.phone_number_id = w.sender AND n.status = 'queued' AND NOT n.blocked
                         AND n.priority = 1 AND n.next_attempt_at <= now()
                       ORDER BY n.next_attempt_at LIMIT q.slots FOR UPDATE SKIP LOCKED) p1
        UNION ALL
        SELECT * FROM (SELECT n.id, n.phone_number_id, n.recipient, n.ordered, n.priority, n.next_attempt_at,
                              n.message
                       FROM wa_outbox.notifications n
                       WHERE n.phone_number_id = w.sender AND n.status = 'queued' AND NOT n.blocked
                         AND n.priority > 1 AND n.next_attempt_at <= now()
                       ORDER BY n.priority, n.next_attempt_at LIMIT q.slots FOR UPDATE SKIP LOCKED) p2
        LIMIT q.slots) c
    WHERE q.slots > 0
      AND (w.held OR mine.free OR w.sender IN (SELECT a.phone_number_id FROM ahead a)
           OR NOT EXISTS (SELECT 1 FROM wa_outbox.rate_limits r WHERE r.phone_number_id = w.sender))
    LIMIT %(limit)s
), seen AS (
    SELECT c.id, c.phone_number_id, c.recipient, c.ordered, c.priority, c.next_attempt_at,
           ct.pair_paused_until, ct.pair_paced_until,
           %(enforce_window)s
               AND coalesce(c.message->>'type', CASE WHEN c.message ? 'template' THEN 'template' END)
                   IS DISTINCT FROM 'template'
               AND (ct.last_inbound_at IS NULL OR ct.last_inbound_at < now() - interval '24 hours') AS outside,
           coalesce(c.message->>'type', CASE WHEN c.message ? 'template' THEN 'template' END) = 'template'
               AS is_template,
           ct.last_inbound_at
    FROM candidates c
    -- One primary-key probe per candidate (LIMIT 1 keeps the planner from turning this into a join that reads the
    -- whole contacts table, one row per recipient ever paced: a claim must stay O(batch)).
    LEFT JOIN LATERAL (SELECT k.pair_paused_until, k.pair_paced_until, k.last_inbound_at FROM wa_outbox.contacts k
                       WHERE k.phone_number_id = c.phone_number_id AND k.wa_id = c.recipient LIMIT 1) ct ON true
), judged AS (
    SELECT s.*,
           NOT s.outside AND s.ordered AND EXISTS (
               SELECT 1 FROM wa_outbox.notifications p
               WHERE p.phone_number_id = s.phone_number_id AND p.recipient = s.recipient AND p.ordered
                 AND p.status IN ('queued', 'sending', 'unknown') AND p.id < s.id
                 AND p.id NOT IN (SELECT o.id FROM seen o WHERE o.outside)) AS follows
    FROM seen s
), ranked AS (  -- the rows that may go as far as order and the window are concerned, ranked per recipient
    SELECT j.*, greatest(coalesce(j.pair_paced_until, now()), now()) AS first_slot,
           row_number() OVER (PARTITION BY j.phone_number_id, j.recipient
                              ORDER BY j.priority, j.next_attempt_at, j.id) AS pair_rank
    FROM judged j
    WHERE NOT j.outside AND NOT j.follows
), paced AS (  -- the k-th message to a recipient may go once first_slot + (k - burst) intervals have passed
    SELECT r.id, r.phone_number_id, r.priority, r.next_attempt_at, r.recipient, r.is_template, r.last_inbound_at,
           CASE WHEN r.pair_paused_until > now() THEN r.pair_paused_until
                WHEN r.first_slot + make_interval(secs => (r.pair_rank - %(pair_burst)s) * %(pair_interval)s) > now()
                    THEN r.first_slot + make_interval(secs => (r.pair_rank - %(pair_burst)s) * %(pair_interval)s)
           END AS pair_wait
    FROM ranked r
), limited AS MATERIALIZED (  -- the batch's senders with a limited portfolio (none set: not read), once each
    SELECT w.sender, po.portfolio_id
    FROM walk w
    JOIN wa_outbox.senders s ON s.phone_number_id = w.sender
    JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
    JOIN wa_outbox.portfolios po ON po.portfolio_id = b.portfolio_id AND po.messaging_limit IS NOT NULL
    WHERE EXISTS (SELECT 1 FROM wa_outbox.portfolios x WHERE x.messaging_limit IS NOT NULL)  -- once, first
), counting AS (  -- the rows that would take a unit, each with its customer's rank in the batch's order (per
    -- portfolio: window functions over the batch, no join of the batch with itself)
    SELECT c.*, dense_rank() OVER (PARTITION BY c.portfolio_id ORDER BY c.first_priority, c.first_due, c.first_id)
               AS customer_rank
    FROM (SELECT p.id, l.portfolio_id, p.recipient,
                 min(p.priority) OVER w AS first_priority, min(p.next_attempt_at) OVER w AS first_due,
                 min(p.id) OVER w AS first_id
          FROM paced p
          JOIN limited l ON l.sender = p.phone_number_id
          -- the customer's last unit: one index probe
          LEFT JOIN LATERAL (SELECT max(u.counted_at) AS counted_at FROM wa_outbox.portfolio_units u
                             WHERE u.portfolio_id = l.portfolio_id AND u.wa_id = p.recipient) u ON true
          WHERE p.pair_wait IS NULL
            AND wa_outbox.counts_against_limit(p.is_template, p.last_inbound_at, u.counted_at, now())
          WINDOW w AS (PARTITION BY l.portfolio_id, p.recipient)) c
), locked AS (  -- the portfolios' rows, locked to the commit: a concurrent claim's units are in the `used` read here
    SELECT po.portfolio_id, po.messaging_limit, po.used FROM wa_outbox.portfolios po
    WHERE po.portfolio_id IN (SELECT c.portfolio_id FROM counting c) AND po.messaging_limit IS NOT NULL
    ORDER BY po.portfolio_id FOR UPDATE
), expired AS (  -- the units that freed (under the lock: each is taken off `used` by one claim only)
    DELETE FROM wa_outbox.portfolio_units u
    WHERE u.portfolio_id IN (SELECT l.portfolio_id FROM locked l) AND u.counted_at <= now() - interval '24 hours'
    RETURNING u.portfolio_id
), budget AS (  -- each portfolio's units left, the new customers it wants, and when its oldest unit frees
    SELECT l.portfolio_id, b.base, greatest(0, l.messaging_limit - b.base) AS room,
           (SELECT max(c.customer_rank) FROM counting c WHERE c.portfolio_id = l.portfolio_id) AS wanted,
           wa_outbox.next_unit_frees((SELECT min(u.counted_at) FROM wa_outbox.portfolio_units u
                                      WHERE u.portfolio_id = l.portfolio_id
                                        AND u.counted_at > now() - interval '24 hours'), now()) AS frees_at
    FROM locked l
    CROSS JOIN LATERAL (SELECT greatest(0, l.used - (SELECT count(*) FROM expired e
                                                     WHERE e.portfolio_id = l.portfolio_id))::integer AS base) b
), units AS (  -- a unit for each customer within the room (their first row)
    INSERT INTO wa_outbox.portfolio_units (portfolio_id, wa_id, notification_id)
    SELECT c.portfolio_id, c.recipient, c.id FROM counting c JOIN budget b USING (portfolio_id)
    WHERE c.id = c.first_id AND c.customer_rank <= b.room
), used_on AS (
    UPDATE wa_outbox.portfolios po SET used = b.base + least(b.wanted, b.room)::integer
    FROM budget b WHERE po.portfolio_id = b.portfolio_id
), held AS (  -- the rows of the customers over the room: they wait for the oldest unit to free
    SELECT c.id, b.portfolio_id, b.frees_at
    FROM counting c JOIN budget b ON b.portfolio_id = c.portfolio_id
    WHERE c.customer_rank > b.room
), free AS (
    SELECT p.*, row_number() OVER (PARTITION BY p.phone_number_id ORDER BY p.priority, p.next_attempt_at, p.id)
               AS token_rank
    FROM paced p WHERE p.pair_wait IS NULL AND p.id NOT IN (SELECT h.id FROM held h)
), wanted AS MATERIALIZED (  -- the slots each sender's rows want that were not reserved ahead; held: the walk
    -- holds the sender's rate_limits row lock
    SELECT f.phone_number_id, count(*)::integer AS n,
           f.phone_number_id IN (SELECT w.sender FROM walk w WHERE w.held) AS held
    FROM free f
    WHERE f.phone_number_id NOT IN (SELECT a.phone_number_id FROM ahead a) GROUP BY f.phone_number_id
), grants AS (
    SELECT a.phone_number_id, a.granted, a.slots_from, a.level, a.refill, a.paused FROM ahead a
    UNION ALL
    SELECT g.phone_number_id, g.granted, g.slots_from, g.level, g.refill, g.paused  -- the held ones in one call
    FROM wa_outbox.reserve_slots_set(
        ARRAY(SELECT w.phone_number_id FROM wanted w WHERE w.held ORDER BY w.phone_number_id),
        ARRAY(SELECT w.n FROM wanted w WHERE w.held ORDER BY w.phone_number_id),
        %(default_mps)s, %(lead)s, %(horizon)s, held => true) g
    UNION ALL
    SELECT g.phone_number_id, g.granted, g.slots_from, g.level, g.refill, g.paused  -- the others (locked there)
    FROM wa_outbox.reserve_slots_set(
        ARRAY(SELECT w.phone_number_id FROM wanted w WHERE NOT w.held ORDER BY w.phone_number_id),
        ARRAY(SELECT w.n FROM wanted w WHERE NOT w.held ORDER BY w.phone_number_id),
        %(default_mps)s, %(lead)s, %(horizon)s) g
    WHERE EXISTS (SELECT 1 FROM wanted w WHERE NOT w.held)
), decided AS (  -- a row's slot: the token_rank-th from the sender's schedule
    SELECT j.id,
           CASE WHEN j.outside THEN 'dead' WHEN j.follows THEN 'park' WHEN p.pair_wait IS NOT NULL THEN 'wait'
                WHEN h.id IS NOT NULL THEN 'hold' WHEN f.token_rank <= g.granted THEN 'claim' ELSE 'wait' END AS action,
           h.portfolio_id,
           coalesce(p.pair_wait, h.frees_at, greatest(now(),
                    g.slots_from + make_interval(secs => greatest(0, f.token_rank - g.level) / g.refill
                                                         - CASE WHEN g.paused THEN 0 ELSE %(horizon)s END)))
               AS wait_until,
           g.slots_from + make_interval(secs => greatest(0, f.token_rank - g.level) / g.refill) AS send_at
    FROM judged j
    LEFT JOIN paced p ON p.id = j.id
    LEFT JOIN free f ON f.id = j.id
    LEFT JOIN held h ON h.id = j.id
    LEFT JOIN grants g ON g.phone_number_id = f.phone_number_id
), deferred AS (
    UPDATE wa_outbox.notifications n
    SET blocked = (d.action = 'park'),
        next_attempt_at = CASE WHEN d.action IN ('wait', 'hold') THEN d.wait_until ELSE n.next_attempt_at END,
        hold_reason = CASE WHEN d.action = 'hold' THEN 'messaging_limit'
                           WHEN n.hold_reason = 'messaging_limit' THEN NULL ELSE n.hold_reason END
    FROM decided d
    WHERE n.id = d.id AND d.action IN ('park', 'wait', 'hold')
    RETURNING n.id, n.attempts, n.correlation_id, d.action, d.wait_until, d.portfolio_id
), died AS (
    UPDATE wa_outbox.notifications n
    SET status = 'dead', updated_at = now(),
        last_error = jsonb_build_object(
            'message', 'outside the 24-hour customer service window: the recipient has not written in 24 hours, '
                       'so only a template may be sent (WA_OUTBOX_SERVICE_WINDOW=enforce)',
            'reason', 'outside_service_window')
    FROM decided d
    WHERE n.id = d.id AND d.action = 'dead'
    RETURNING n.id, n.attempts, n.correlation_id
), released AS (  -- a message that died here lets the next one of its line go
    UPDATE wa_outbox.notifications n
    SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
    WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(SELECT id FROM died))) AND n.blocked AND n.status = 'queued'
), claimed AS (
    UPDATE wa_outbox.notifications n
    SET status = 'sending', attempts = n.attempts + 1, locked_by = %(worker_id)s,
        hold_reason = CASE WHEN n.hold_reason = 'messaging_limit' THEN NULL ELSE n.hold_reason END,
        locked_until = greatest(now(), d.send_at) + make_interval(secs => %(lease_seconds)s), updated_at = now()
    FROM decided d
    WHERE n.id = d.id AND d.action = 'claim'
    RETURNING n.id, n.phone_number_id, n.recipient, n.message, n.attempts, n.max_attempts, n.correlation_id,
              extract(epoch FROM d.send_at)::double precision AS send_at
), paced_on AS (  -- each recipient's budget moves one interval per claimed message (in key order: no deadlocks)
    INSERT INTO wa_outbox.contacts AS ct (phone_number_id, wa_id, pair_paced_until)
    SELECT phone_number_id, recipient, now() + make_interval(secs => count(*) * %(pair_interval)s)
    FROM claimed
    WHERE %(pair_interval)s > 0  -- pacing off (WA_OUTBOX_PAIR_RATE_SECONDS=0): nothing to remember
    GROUP BY phone_number_id, recipient ORDER BY phone_number_id, recipient
    ON CONFLICT (phone_number_id, wa_id) DO UPDATE
    SET pair_paced_until = greatest(ct.pair_paced_until, now()) + (excluded.pair_paced_until - now())
), events AS (
    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
    SELECT id, 'sending', attempts, jsonb_build_object('worker', %(worker_id)s::text, 'send_at', send_at),
           correlation_id
    FROM claimed
    UNION ALL
    SELECT id, 'dead', attempts, '{"reason": "outside_service_window"}'::jsonb, correlation_id FROM died
    UNION ALL
    SELECT id, 'limit_held', attempts, jsonb_build_object('reason', 'messaging_limit', 'portfolio_id', portfolio_id,
                                                          'until', wait_until), correlation_id
    FROM deferred WHERE action = 'hold'
), woken AS (  -- rows parked took places in this batch: wake the workers (at commit) to claim again at once
    SELECT pg_notify('wa_outbox_notifications', '') FROM decided WHERE action = 'park' LIMIT 1
)
-- slot_margin: how late after its slot the row's send may still go (its sender's schedule's margin, schema.sql); a
-- schedule this statement created (reserve_slots_set) is not visible here: it has the default rate. more: the walk
-- stopped with senders still unvisited (the batch's shares filled it before it went round the whole circle): a
-- claim that came back short of %(limit)s (rows over a grant, rows another worker holds) may go on at once.
SELECT c.id, c.phone_number_id, c.recipient, c.message, c.attempts, c.max_attempts, c.correlation_id, c.send_at,
       coalesce((SELECT wa_outbox.slot_margin(r.mps, r.burst) FROM wa_outbox.rate_limits r
                 WHERE r.phone_number_id = c.phone_number_id),
                wa_outbox.slot_margin(%(default_mps)s, NULL)) AS slot_margin,
       coalesce((SELECT NOT l.whole FROM lap l), false) AS more
FROM claimed c
WHERE (SELECT count(*) FROM woken) >= 0  -- evaluated once, first: so the wake-up runs even when nothing is claimed
