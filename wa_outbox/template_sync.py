"""`wa-outbox templates sync`: read a business account's templates from Meta (`GET /{waba-id}/message_templates`,
following `paging.next` page after page) with the token of one of its registered senders, and record them as a
webhook would (template_store.apply_changes: a template whose status now holds, releases or disables its messages
does so). https://developers.facebook.com/docs/graph-api/reference/whats-app-business-account/message_templates/"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
import sqlalchemy as sa

from . import accounts, queries, registry
from .config import ConfigError, Settings
from .template_store import Applied, apply_changes
from .templates import TemplateChange, sync_change, vanished

PAGE_SIZE = 100
MAX_PAGES = 1000  # a listing that never ends (a broken `next`) stops here
MAX_KNOWN = 1_000_000  # the known templates of one business account compared with the listing (all of them)


class SyncError(Exception):
    """The sync could not read Meta's listing (no sender for the WABA, no token, an error answer)."""


@dataclass(frozen=True)
class Synced:
    waba_id: str
    pages: int
    templates: int
    applied: Applied
    vanished: int = 0  # known templates the listing no longer has: recorded as DELETED


def _token_for(engine: sa.Engine, settings: Settings, waba_id: str) -> str:
    senders = [s for s in accounts.senders(engine, settings) if s.waba_id == waba_id]
    if not senders:
        raise SyncError(f"no registered sender of WABA {waba_id}: its templates are read with a sender's token "
                        f"(`wa-outbox senders add ID --waba {waba_id} …`)")
    problems = []
    for sender in senders:
        try:
            return registry.token_of(engine, settings, sender.phone_number_id)
        except ConfigError as exc:
            problems.append(f"{sender.phone_number_id}: {exc}")
    raise SyncError(f"no sender of WABA {waba_id} has a token to read with ({'; '.join(problems)})")


def _graph_error(answer: requests.Response) -> str:
    try:
        error = answer.json().get("error") or {}
    except ValueError:
        error = {}
    if isinstance(error, dict) and error.get("message"):
        return f"HTTP {answer.status_code}, {error.get('code')}: {error.get('message')}"
    return f"HTTP {answer.status_code}"


def sync(engine: sa.Engine, settings: Settings, waba_id: str, *, actor: str = "cli",
         session: requests.Session | None = None) -> Synced:
    token = _token_for(engine, settings, waba_id)
    http = session or requests.Session()
    base = settings.api_base_url.rstrip("/")
    url: str | None = f"{base}/{waba_id}/message_templates"
    params: dict[str, Any] | None = {"limit": PAGE_SIZE}
    changes: list[TemplateChange] = []
    pages, now = 0, int(time.time())
    origin = urlsplit(base)[:2]
    while url is not None and pages < MAX_PAGES:  # url None after the loop: the whole listing was read
        if urlsplit(url)[:2] != origin:  # the token goes only where the API is
            raise SyncError(f"paging.next points away from {settings.api_base_url}: stopped")
        try:
            answer = http.get(url, params=params, headers={"Authorization": f"Bearer {token}"},
                              timeout=(settings.connect_timeout, settings.send_timeout))
        except requests.RequestException as exc:
            raise SyncError(f"GET /{waba_id}/message_templates failed: {type(exc).__name__}") from None
        if answer.status_code != 200:
            raise SyncError(f"GET /{waba_id}/message_templates: {_graph_error(answer)}")
        try:
            body = answer.json()
        except ValueError:
            raise SyncError(f"GET /{waba_id}/message_templates: the answer is not JSON") from None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise SyncError(f"GET /{waba_id}/message_templates: no `data` list in the answer")
        pages += 1
        changes += [c for c in (sync_change(waba_id, item, now) for item in data) if c is not None]
        paging = body.get("paging") if isinstance(body.get("paging"), dict) else {}
        following = paging.get("next")
        url, params = (following, None) if isinstance(following, str) and following and data else (None, None)
    listed = len(changes)
    gone: list[TemplateChange] = []
    if url is None:  # read to its end: what it lacks was deleted at Meta
        known = queries.templates_list(engine, waba_id=waba_id, limit=MAX_KNOWN)
        gone = vanished(waba_id, ((t.name, t.language, t.status) for t in known), changes, now)
    applied = apply_changes(engine, changes + gone, actor=actor)
    return Synced(waba_id=waba_id, pages=pages, templates=listed, applied=applied, vanished=len(gone))
