"""`wa-outbox events`: the events for apps, read from the feed (`tail`) or received as an endpoint (`listen`)."""

from __future__ import annotations

import json as _json
from typing import Any

import click

from ._common import _engine, _settings
from ._errors import CliError


@click.group()
def events() -> None:
    """Events for apps: read the feed, or receive deliveries as an endpoint would."""


@events.command()
@click.option("--after", metavar="CURSOR", help="Start after this cursor (default: the oldest event kept).")
@click.option("--types", metavar="TYPE,…", help="Only these event types (comma-separated).")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new events (Ctrl-C ends).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line: the envelope and its cursor.")
def tail(after: str | None, types: str | None, follow: bool, as_json: bool) -> None:
    """Print the events feed, oldest first: each event once, in order (the same as GET /v1/events).

    Without --follow, stops at the newest readable event and prints its cursor on stderr (pass it to --after to
    carry on from there)."""
    from .. import events as feed
    from ..event_notices import EventNotices
    settings = _settings()
    engine = _engine(settings)
    notices = EventNotices(settings) if follow else None
    try:
        wanted = feed.parse_types(types)
        cursor = after
        while True:
            page = feed.read_feed(engine, after=cursor, limit=feed.MAX_LIMIT, types=wanted,
                                  wait=feed.MAX_WAIT_SECONDS if follow else 0, notices=notices)
            for envelope, event_cursor in zip(page.data, page.cursors, strict=True):
                click.echo(_json.dumps({"cursor": event_cursor, **envelope}, ensure_ascii=False) if as_json
                           else _line(envelope, event_cursor))
            cursor = page.next_cursor
            if not page.has_more and not follow:
                break
    except feed.FeedError as exc:
        raise CliError(str(exc)) from None
    except feed.CursorPruned as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        raise CliError(f"interrupted; carry on with --after {cursor}" if cursor else "interrupted",
                       exit_code=130) from None
    if not as_json and cursor:
        click.echo(f"next cursor: {cursor}", err=True)


def _line(envelope: dict[str, Any], cursor: str) -> str:
    """A human line: when, the id, the type, what it says."""
    return f"{envelope['timestamp']}  {envelope['id']}  {envelope['type']}  {_summary(envelope)}  [{cursor}]"


def _summary(envelope: dict[str, Any]) -> str:
    data = envelope["data"]
    if envelope["type"] == "message.status":
        text = f"outbox {data.get('outbox_id')} {data.get('status')} (to +{data.get('recipient')})"
        return text + (f": {data['error'].get('message')}" if isinstance(data.get("error"), dict)
                       and data["error"].get("message") else "")
    if envelope["type"] in ("message.received", "message.echo"):
        message = data.get("message") if isinstance(data.get("message"), dict) else {}
        body = message.get("text", {}).get("body") if isinstance(message.get("text"), dict) else None
        return f"{message.get('type')} from +{message.get('from')}" + (f": {body[:80]!r}" if body else "")
    return f"field {data.get('field')}"
