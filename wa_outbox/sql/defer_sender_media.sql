-- A sender's token was refused on a media fetch: the sender is paused (pause_sender.sql) and its other pending media
-- wait as long, so the queue goes on with the other senders' and this one's do not each draw the same refusal.
-- Safe to repeat: the wait is the later of the two.
UPDATE wa_outbox.media m
SET next_attempt_at = greatest(m.next_attempt_at, now() + make_interval(secs => %(seconds)s))
WHERE m.state = 'pending' AND m.phone_number_id = %(phone_number_id)s
RETURNING m.id
