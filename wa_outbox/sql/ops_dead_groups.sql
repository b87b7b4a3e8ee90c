-- The ops page: the dead-letter queue grouped by error code ('' for none), largest group first, each with its
-- newest messages as samples. Served by notifications_dead_code, which holds dead rows only: the groups are counted
-- from it alone (it includes last_error, so an index-only scan is possible), the samples read 5 rows a group.
-- Safe to repeat: a read.
SELECT g.code, g.count, g.newest_id, s.samples
FROM (
    SELECT coalesce(n.last_error ->> 'code', '') AS code, count(*) AS count, max(n.id) AS newest_id
    FROM wa_outbox.notifications n
    WHERE n.status = 'dead'
    GROUP BY 1
) g
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', d.id, 'recipient', d.recipient,
                                                 'phone_number_id', d.phone_number_id, 'attempts', d.attempts,
                                                 'message', d.last_error ->> 'message', 'died_at', d.updated_at)
                              ORDER BY d.id DESC), '[]'::jsonb) AS samples
    FROM (SELECT * FROM wa_outbox.notifications d
          WHERE d.status = 'dead' AND coalesce(d.last_error ->> 'code', '') = g.code
          ORDER BY d.id DESC LIMIT %(samples)s) d
) s
ORDER BY g.count DESC, g.code
LIMIT %(groups)s
