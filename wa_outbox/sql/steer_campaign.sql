-- Pause, resume or cancel a campaign by name (wa-outbox campaign pause|resume|cancel, POST /v1/campaigns/<name>/…):
-- the campaign's status and its messages move together, set-based (wa_outbox.steer_campaign).
-- Safe to repeat: a second run finds nothing more to move (moved = 0) and leaves the same status.
SELECT campaign_id, name, status, previous_status, moved
FROM wa_outbox.steer_campaign(%(name)s, %(action)s, %(actor)s, %(reason)s)
