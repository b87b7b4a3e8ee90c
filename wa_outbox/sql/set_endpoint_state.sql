-- Disable or enable an endpoint (wa-outbox endpoints disable|enable, /v1/endpoints/<id>/disable|enable, the ops
-- page). Disabling by an operator records reason 'operator'; enabling clears the reason and the failing state
-- (failing_since), so the N-days rule counts afresh. Returns nothing for an unknown id.
-- Safe to repeat: the second run sets the same state (an already disabled endpoint keeps its reason and time).
UPDATE wa_outbox.endpoints e
SET state = %(state)s,
    disabled_reason = CASE WHEN %(state)s = 'enabled' THEN NULL
                           WHEN e.state = 'disabled' THEN e.disabled_reason ELSE %(reason)s END,
    disabled_at = CASE WHEN %(state)s = 'enabled' THEN NULL
                       WHEN e.state = 'disabled' THEN e.disabled_at ELSE now() END,
    failing_since = CASE WHEN %(state)s = 'enabled' THEN NULL ELSE e.failing_since END,
    updated_at = now()
FROM (SELECT id, state FROM wa_outbox.endpoints WHERE id = %(id)s FOR UPDATE) was
WHERE e.id = was.id
RETURNING e.id, e.state, was.state AS previous_state, e.disabled_reason, e.disabled_at
