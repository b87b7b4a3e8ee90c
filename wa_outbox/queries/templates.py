"""The template lifecycle: the templates table and the messages its templates hold (wa_outbox/templates.py decides)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ._run import _one, _rows


@dataclass(frozen=True, slots=True)
class TemplateChanged:
    waba_id: str
    name: str
    language: str
    previous_status: str | None
    status: str | None
    status_news: bool  # the batch carried a status word for it


def apply_template_changes(engine: sa.Engine, *, changes: str) -> list[TemplateChanged]:
    """Upsert template changes (`changes`: JSON text of templates.TemplateChange rows)."""
    return _rows(engine, "apply_template_changes", TemplateChanged, {"changes": changes})


@dataclass(frozen=True, slots=True)
class TemplateHeld:
    held: int


def template_hold(engine: sa.Engine, *, templates: str, ids: list[int], worker_id: str) -> int:
    """Hold the queued messages of `templates` (JSON [{waba_id, name, language, hold_reason}]); how many."""
    return _one(engine, "template_hold", TemplateHeld,
                {"templates": templates, "ids": ids, "worker_id": worker_id}).held


@dataclass(frozen=True, slots=True)
class TemplateReleased:
    released: int


def template_release(engine: sa.Engine, *, templates: str) -> int:
    """Release the messages `templates` (JSON [{waba_id, name, language}]) hold, in their order; how many."""
    return _one(engine, "template_release", TemplateReleased, {"templates": templates}).released


@dataclass(frozen=True, slots=True)
class TemplateDead:
    campaign: str | None  # an active campaign of the dead messages (None: messages of no active campaign)
    dead: int


def template_dead(engine: sa.Engine, *, templates: str, ids: list[int], worker_id: str) -> list[TemplateDead]:
    """Dead-letter the queued messages of disabled `templates` (JSON [{waba_id, name, language}])."""
    return _rows(engine, "template_dead", TemplateDead, {"templates": templates, "ids": ids, "worker_id": worker_id})


@dataclass(frozen=True, slots=True)
class TemplateMarked:
    waba_id: str
    name: str
    language: str


def template_mark(engine: sa.Engine, *, phone_number_id: str, name: str, language: str, status: str,
                  reason: str | None) -> list[TemplateMarked]:
    return _rows(engine, "template_mark", TemplateMarked, {
        "phone_number_id": phone_number_id, "name": name, "language": language, "status": status, "reason": reason})


@dataclass(frozen=True, slots=True)
class ClaimedHeld:
    id: int
    action: str  # template_paused | template_not_approved (held) | dead (template_disabled)


def hold_claimed_templates(engine: sa.Engine, *, ids: list[int], worker_id: str, paused_words: list[str],
                           not_approved_words: list[str], disabled_words: list[str]) -> list[ClaimedHeld]:
    return _rows(engine, "hold_claimed_templates", ClaimedHeld, {
        "ids": ids, "worker_id": worker_id, "paused_words": paused_words, "not_approved_words": not_approved_words,
        "disabled_words": disabled_words})


@dataclass(frozen=True, slots=True)
class TemplateRow:
    waba_id: str
    name: str
    language: str
    template_id: str | None
    status: str | None
    quality: str | None
    category: str | None
    reason: str | None
    category_pending: str | None
    category_change_at: datetime | None
    status_at: datetime | None
    synced_at: datetime | None
    created_at: datetime
    updated_at: datetime
    components: Any
    held: int


def templates_list(engine: sa.Engine, *, waba_id: str | None = None, status: str | None = None,
                   name: str | None = None, language: str | None = None, limit: int = 1000) -> list[TemplateRow]:
    return _rows(engine, "templates_list", TemplateRow, {
        "waba_id": waba_id, "status": status, "name": name, "language": language, "limit": limit})
