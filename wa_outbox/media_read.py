"""Reading media an app holds an id of (Meta's media id as the webhook carried it, or wa-outbox's own): the row's
public description and its bytes, for GET /v1/media/<id> and `wa-outbox media show|get` alike.

Before its bytes are kept, a media is in one of the states an app can be told (`pending`, `failed`, `expired`,
`too_large`): a fetch in progress is still `pending` to the app.
"""

from __future__ import annotations

import re
from typing import Any

from .media_policy import MediaState
from .queries import MediaRow

# What an app is told of a media that is not stored (fetching is the workers' own step).
_SHOWN_STATE = {MediaState.FETCHING.value: MediaState.PENDING.value}


def shown_state(row: MediaRow) -> str:
    return _SHOWN_STATE.get(row.state, row.state)


def describe(row: MediaRow) -> dict[str, Any]:
    """The media as JSON (`media show --json`): no store key, no download URL."""
    return {"id": row.id, "media_id": row.meta_media_id, "direction": row.direction, "state": shown_state(row),
            "kind": row.kind, "mime_type": row.mime_type, "filename": row.filename, "size": row.size,
            "sha256": row.sha256, "declared_size": row.declared_size, "declared_sha256": row.declared_sha256,
            "phone_number_id": row.phone_number_id, "wa_id": row.wa_id, "wamid": row.wamid, "store": row.store,
            "attempts": row.attempts, "last_error": row.last_error,
            "created_at": row.created_at.isoformat(), "stored_at": row.stored_at.isoformat() if row.stored_at else None,
            "next_attempt_at": row.next_attempt_at.isoformat() if row.state == MediaState.PENDING else None,
            "fetch_until": row.fetch_until.isoformat() if row.fetch_until else None}


_RANGE = re.compile(r"bytes=([0-9]{0,18})-([0-9]{0,18})")


class Unsatisfiable(ValueError):
    """A Range the file cannot serve (416)."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """A single `Range: bytes=…` as [start, end) within `size`; None to serve the whole file (no header, or one this
    server does not serve in part: several ranges, another unit — RFC 9110 lets it ignore those); Unsatisfiable for
    a range wholly past the end."""
    if not header:
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match[1], match[2]
    if first == "" and last == "":
        return None
    if first == "":  # the last N bytes
        suffix = int(last)
        if suffix == 0:
            raise Unsatisfiable("an empty suffix range")
        return max(0, size - suffix), size
    start = int(first)
    if start >= size:
        raise Unsatisfiable(f"the range starts at {start}, the file has {size} bytes")
    end = size if last == "" else min(size, int(last) + 1)
    if end <= start:
        return None  # last < first: syntactically invalid, ignored
    return start, end
