-- A send of sender %(phone_number_id)s was refused for its template (%(name)s, %(language)s): 132015 (paused) or
-- 132016 (disabled). Record it as the template's status (%(status)s), as a webhook would, in the business account
-- of the sender. No row: the sender is not registered (its business account is unknown). Its time is not Meta's:
-- status_at stays as it was (NULL for a new row), so the next webhook of the template, whatever its time, wins.
-- Safe to repeat: the same status is written again.
INSERT INTO wa_outbox.templates AS t (waba_id, name, language, status, reason, status_at)
SELECT s.waba_id, %(name)s, %(language)s, %(status)s, %(reason)s, NULL::timestamptz
FROM wa_outbox.senders s WHERE s.phone_number_id = %(phone_number_id)s
ON CONFLICT (waba_id, name, language) DO UPDATE
SET status = excluded.status, reason = excluded.reason, updated_at = now()
RETURNING t.waba_id, t.name, t.language
