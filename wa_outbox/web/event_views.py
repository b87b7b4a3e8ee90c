"""The events feed over HTTP, behind the same bearer tokens as the rest of /v1.

GET /v1/events?after=CURSOR&limit=N&types=a,b&wait=SECONDS
    → {"data": [envelopes], "next_cursor", "has_more"}; a client that always passes the last next_cursor sees every
    event once (wa_outbox/events.py: read_feed). 400 for bad parameters, 410 for a cursor older than retention.
"""

from __future__ import annotations

import threading

from flask import Blueprint, current_app, jsonify, request

from .. import events
from ..event_notices import EventNotices
from . import api_views
from .app_state import engine_of, settings_of
from .errors import json_error

blueprint = Blueprint("events", __name__, url_prefix="/v1/events")
blueprint.before_request(api_views.require_token)
_notices_lock = threading.Lock()


def _notices() -> EventNotices:
    """The process's listener for long polls, started by the first one."""
    with _notices_lock:
        notices = current_app.extensions.get("wa_outbox.event_notices")
        if notices is None:
            notices = current_app.extensions["wa_outbox.event_notices"] = EventNotices(settings_of(current_app))
        return notices


@blueprint.get("")
def list_events():
    args = request.args
    try:
        limit = _int(args.get("limit"), 100, "limit")
        wait = _int(args.get("wait"), 0, "wait")
        types = events.parse_types(args.get("types"))
        notices = _notices() if wait else None
        if notices is None:
            page = events.read_feed(engine_of(current_app), after=args.get("after") or None, limit=limit,
                                    types=types)
        else:
            with notices.waiting_slot() as may_wait:
                page = events.read_feed(engine_of(current_app), after=args.get("after") or None, limit=limit,
                                        types=types, wait=wait if may_wait else 0, notices=notices)
    except events.FeedError as exc:
        return json_error(400, str(exc))
    except events.CursorPruned as exc:
        return json_error(410, str(exc))
    return jsonify(data=page.data, next_cursor=page.next_cursor, has_more=page.has_more)


def _int(raw: str | None, default: int, name: str) -> int:
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise events.FeedError(f"{name} must be a whole number")
    return int(raw)
