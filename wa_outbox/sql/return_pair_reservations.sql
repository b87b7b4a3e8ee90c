-- Give back the recipients' pair-pacing reservations of claimed rows this worker gives back unsent (before their
-- send slot), so a send that never happened does not hold the next one to that recipient back. The rules, and why
-- it is safe, are in wa_outbox.return_pair_reservations (schema.sql, Contacts). Run before the rows are recorded
-- as released: only rows still `sending` under this worker's lease count.
-- Not safe to repeat: a second run would take back the same intervals again.
SELECT wa_outbox.return_pair_reservations(%(ids)s::bigint[], %(worker_id)s, %(pair_interval)s) AS returned
