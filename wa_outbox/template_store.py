"""The template lifecycle against the database: record what Meta says of templates (webhooks, a sync, a refused
send) and do to their messages what that means (wa_outbox/templates.py decides): hold, release in order, or
dead-letter and pause their campaigns. Each step is one statement for all the templates of a batch."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from . import queries
from .templates import TemplateAction, TemplateChange, hold_reason, status_action, template_action

log = logging.getLogger("wa_outbox.templates")


@dataclass
class Applied:
    """What a batch of template changes did to messages."""
    templates: int = 0
    held: int = 0
    held_by: dict[str, int] = field(default_factory=dict)  # hold_reason -> messages held
    released: int = 0
    dead: int = 0
    campaigns_paused: list[str] = field(default_factory=list)


def apply_changes(engine: sa.Engine, changes: Iterable[TemplateChange], actor: str) -> Applied:
    """Record `changes` (one statement), then act on the status of every template the changes said a status of: one
    statement per kind of action for the whole batch."""
    entries = [c.as_json() for c in changes]
    applied = Applied()
    if not entries:
        return applied
    rows = queries.apply_template_changes(engine, changes=json.dumps(entries))
    applied.templates = len(rows)
    by_action: dict[TemplateAction, list[dict]] = {}
    for row in rows:
        action = status_action(row.status, row.status_news)
        if action is not None:
            by_action.setdefault(action, []).append({"waba_id": row.waba_id, "name": row.name,
                                                     "language": row.language})
    for action, keys in by_action.items():
        reason = hold_reason(action)
        if reason is not None:
            held = queries.template_hold(engine, templates=json.dumps(
                [{**k, "hold_reason": reason.value} for k in keys]), ids=[], worker_id="")
            applied.held += held
            applied.held_by[reason.value] = held
        elif action is TemplateAction.RELEASE:
            applied.released += queries.template_release(engine, templates=json.dumps(keys))
        elif action is TemplateAction.DEAD:
            dead = disable(engine, keys, ids=[], worker_id="", actor=actor)
            applied.dead += dead.dead
            applied.campaigns_paused += dead.campaigns_paused
    if applied.held or applied.released or applied.dead:
        log.info("templates changed: %d messages held, %d released, %d dead (template_disabled)", applied.held,
                 applied.released, applied.dead, extra={"templates": [k for keys in by_action.values() for k in keys]})
    return applied


def disable(engine: sa.Engine, keys: list[dict], *, ids: list[int], worker_id: str, actor: str) -> Applied:
    """Dead-letter the queued messages of disabled templates (and `ids`, refused sends under `worker_id`'s lease),
    then pause the active campaigns they belong to, with an alert in the log."""
    applied = Applied()
    rows = queries.template_dead(engine, templates=json.dumps(keys), ids=ids, worker_id=worker_id)
    names = ", ".join(f"{k['name']} ({k['language']})" for k in keys)
    for row in rows:
        applied.dead += row.dead
        if row.campaign is None:
            continue
        try:
            queries.steer_campaign(engine, name=row.campaign, action="pause", actor=actor,
                                   reason=f"template {names} disabled (132016)")
        except Exception as exc:  # noqa: BLE001 - cancelled meanwhile: nothing left to pause
            log.warning("could not pause campaign %s after its template was disabled: %s", row.campaign, exc)
            continue
        applied.campaigns_paused.append(row.campaign)
    if applied.dead:
        log.error("template %s disabled: %d messages dead (template_disabled), campaigns paused: %s", names,
                  applied.dead, ", ".join(applied.campaigns_paused) or "none",
                  extra={"alert": "template_disabled", "templates": keys, "dead": applied.dead,
                         "campaigns": applied.campaigns_paused})
    return applied


def refused(engine: sa.Engine, *, phone_number_id: str, name: str, language: str, status: str, reason: str,
            notification_id: int, worker_id: str, actor: str) -> Applied | None:
    """A send refused for its template (132015 PAUSED, 132016 DISABLED): record the template's status and hold (or
    dead-letter) every queued message of it, the refused one included (`sending` under `worker_id`'s lease): one
    refused call, not one per message. None: the sender is not registered, so its template cannot be known."""
    marked = queries.template_mark(engine, phone_number_id=phone_number_id, name=name, language=language,
                                   status=status, reason=reason)
    if not marked:
        return None
    keys = [{"waba_id": m.waba_id, "name": m.name, "language": m.language} for m in marked]
    action = template_action(status)
    if action is TemplateAction.DEAD:
        return disable(engine, keys, ids=[notification_id], worker_id=worker_id, actor=actor)
    held_reason = hold_reason(action) if action is not None else None
    assert held_reason is not None  # REFUSAL_STATUS holds PAUSED and DISABLED only
    held = queries.template_hold(engine, templates=json.dumps([{**k, "hold_reason": held_reason.value}
                                                               for k in keys]),
                                 ids=[notification_id], worker_id=worker_id)
    return Applied(templates=1, held=held, held_by={held_reason.value: held})
