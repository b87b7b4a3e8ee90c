-- A send answered with a spam limit (131048) or a template paused for its quality: pause the whole campaign the
-- message belongs to, so the rest of it waits for an operator instead of drawing the same answer. Runs only after
-- such an answer, never on the hot path. No row: the message has no campaign, or its campaign is not active.
-- Safe to repeat: a paused campaign is not active, so a second run matches nothing.
SELECT s.campaign_id, s.name, s.moved
FROM wa_outbox.notifications n
JOIN wa_outbox.campaigns c ON c.id = n.campaign_id AND c.status = 'active',
     LATERAL wa_outbox.steer_campaign(c.name, 'pause', %(actor)s, %(reason)s) s
WHERE n.id = %(id)s
