-- `senders set --follow-meta-throughput` / `--no-follow-meta-throughput` (and PATCH /v1/senders/<id>): whether a
-- registered sender's pacing follows the throughput Meta grants it. Turned on with a throughput already known, the
-- sender's rate_limits row takes it at once (as record_number_health.sql does when it changes; burst kept).
-- Returns nothing for a sender that is not registered.
-- Safe to repeat: the same values again.
WITH sender AS (
    SELECT s.phone_number_id FROM wa_outbox.senders s WHERE s.phone_number_id = %(phone_number_id)s
), written AS (
    INSERT INTO wa_outbox.number_health AS h (phone_number_id, follow_meta_throughput)
    SELECT phone_number_id, %(follow)s FROM sender
    ON CONFLICT (phone_number_id) DO UPDATE SET follow_meta_throughput = excluded.follow_meta_throughput,
                                                updated_at = now()
    RETURNING h.phone_number_id, h.follow_meta_throughput, h.throughput_mps
), paced AS (
    INSERT INTO wa_outbox.rate_limits AS r (phone_number_id, mps, burst, tokens)
    SELECT w.phone_number_id, w.throughput_mps, NULL, (wa_outbox.bucket_shape(w.throughput_mps, NULL)).capacity
    FROM written w WHERE w.follow_meta_throughput AND w.throughput_mps IS NOT NULL
    ON CONFLICT (phone_number_id) DO UPDATE
    SET mps = excluded.mps, tokens = least(r.tokens, (wa_outbox.bucket_shape(excluded.mps, r.burst)).capacity),
        updated_at = now()
    WHERE r.mps IS DISTINCT FROM excluded.mps
    RETURNING r.phone_number_id, r.mps
)
SELECT w.phone_number_id, w.follow_meta_throughput, w.throughput_mps, p.mps AS paced_mps
FROM written w LEFT JOIN paced p ON p.phone_number_id = w.phone_number_id
