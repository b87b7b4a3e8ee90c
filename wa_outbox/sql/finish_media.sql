-- The fetches that did not store their media (one JSON array of worker/_media.py outcomes): back to `pending` after
-- a delay (a token refused refunds the attempt: it was not the media's fault; bytes that were not the ones Meta
-- declared count in corrupt_fetches, which gives up on them at a few), or final: `failed`, `expired`,
-- `too_large`. What Meta's lookup said (mime type, size, sha256) is kept; a download URL never is.
-- Safe to repeat: guarded by the lease (locked_by, state fetching); a second run matches nothing.
UPDATE wa_outbox.media m
SET state = o.state,
    next_attempt_at = CASE WHEN o.state = 'pending' THEN now() + make_interval(secs => coalesce(o.delay, 0))
                           ELSE m.next_attempt_at END,
    attempts = greatest(0, m.attempts - CASE WHEN o.refund THEN 1 ELSE 0 END),
    corrupt_fetches = o.corrupt_fetches,  -- counted by media_policy's caller: one owner of the rule
    mime_type = coalesce(m.mime_type, o.mime_type),
    declared_size = coalesce(o.declared_size, m.declared_size),
    declared_sha256 = coalesce(m.declared_sha256, o.declared_sha256),
    last_error = o.error, locked_by = NULL, locked_until = NULL
FROM jsonb_to_recordset(%(outcomes)s::jsonb)
     AS o(id bigint, state text, delay float8, refund boolean, corrupt_fetches integer, error jsonb, mime_type text, declared_size bigint,
          declared_sha256 text)
WHERE m.id = o.id AND m.locked_by = %(worker_id)s AND m.state = 'fetching'
RETURNING m.id, m.state
