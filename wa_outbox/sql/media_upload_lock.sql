-- One upload per file and sender at a time, across every worker: the transaction that uploads holds this lock
-- until it has recorded Meta's id (media_upload_record.sql); another worker's waits here, then finds that id.
SELECT pg_advisory_xact_lock(hashtextextended('wa_outbox.media_uploads ' || %(media_id)s::bigint::text || ' '
                                              || %(phone_number_id)s::text, 0))
