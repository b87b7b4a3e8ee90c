"""Inbound media: the fetch queue (claim, outcomes, the stored mark with its media.ready, rescue), and the reads of
one media row (GET /v1/media, `wa-outbox media`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row

from .. import db
from ._run import _ids, _rows


@dataclass(frozen=True, slots=True)
class ClaimedMedia:
    id: int
    meta_media_id: str
    phone_number_id: str | None
    wa_id: str | None
    wamid: str | None
    kind: str | None
    mime_type: str | None
    filename: str | None
    declared_sha256: str | None
    attempts: int            # this attempt's number
    seconds_left: float      # until Meta no longer serves the id (fetch_until)
    corrupt_fetches: int     # earlier downloads whose bytes were not the ones Meta declared


def claim_media(engine: sa.Engine, *, limit: int, worker_id: str, lease_seconds: float) -> list[ClaimedMedia]:
    return _rows(engine, "claim_media", ClaimedMedia,
                 {"limit": limit, "worker_id": worker_id, "lease_seconds": lease_seconds})


@dataclass(frozen=True, slots=True)
class MediaFinished:
    id: int
    state: str


def finish_media(engine: sa.Engine, *, worker_id: str, outcomes: str) -> list[MediaFinished]:
    """`outcomes`: JSON text of worker/_media.py failure outcomes."""
    return _rows(engine, "finish_media", MediaFinished, {"worker_id": worker_id, "outcomes": outcomes})


@dataclass(frozen=True, slots=True)
class MediaStored:
    id: int
    event_seq: int


def media_stored(conn: psycopg.Connection[Any], *, id: int, worker_id: str, store: str, store_key: str | None,
                 size: int, sha256: bytes, mime_type: str | None, declared_size: int | None,
                 declared_sha256: str | None) -> MediaStored | None:
    """In the caller's transaction (the one that wrote the chunks): None when the lease was lost (roll back)."""
    with conn.cursor(row_factory=class_row(MediaStored)) as cursor:
        return cursor.execute(db.query("media_stored"), {
            "id": id, "worker_id": worker_id, "store": store, "store_key": store_key, "size": size,
            "sha256": sha256, "mime_type": mime_type, "declared_size": declared_size,
            "declared_sha256": declared_sha256}).fetchone()


def rescue_media(engine: sa.Engine, *, limit: int) -> list[int]:
    return _ids(engine, "rescue_media", {"limit": limit})


def defer_sender_media(engine: sa.Engine, *, phone_number_id: str, seconds: float) -> list[int]:
    return _ids(engine, "defer_sender_media", {"phone_number_id": phone_number_id, "seconds": seconds})


@dataclass(frozen=True, slots=True)
class MediaRow:
    id: int
    direction: str
    meta_media_id: str | None
    phone_number_id: str | None
    wa_id: str | None
    wamid: str | None
    kind: str | None
    mime_type: str | None
    filename: str | None
    declared_sha256: str | None
    declared_size: int | None
    sha256: str | None       # hex, of the bytes stored
    size: int | None
    state: str
    store: str | None
    store_key: str | None
    attempts: int
    next_attempt_at: datetime
    fetch_until: datetime | None
    last_error: Any
    created_at: datetime
    stored_at: datetime | None


BIGINT_MAX = 2**63 - 1


def get_media(engine: sa.Engine, *, given: str) -> MediaRow | None:
    """By Meta's media id, or wa-outbox's own id (digits)."""
    own_id = int(given) if given.isascii() and given.isdigit() and int(given) <= BIGINT_MAX else None
    found = _rows(engine, "get_media", MediaRow, {"given": given, "own_id": own_id})
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class PrunedMedia:
    id: int
    store: str | None
    store_key: str | None


@dataclass(frozen=True, slots=True)
class MediaLocked:
    id: int
    created_at: datetime


def prune_media_lock(conn: psycopg.Connection[Any], *, limit: int, days: int, after_at: datetime,
                     after_id: int) -> list[MediaLocked]:
    """In the caller's transaction: lock one batch of media older than `days` days, after (after_at, after_id)."""
    with conn.cursor(row_factory=class_row(MediaLocked)) as cursor:
        return cursor.execute(db.query("prune_media_lock"), {"limit": limit, "days": days, "after_at": after_at,
                                                              "after_id": after_id}).fetchall()


def prune_media_batch(conn: psycopg.Connection[Any], *, ids: list[int]) -> list[PrunedMedia]:
    """In the caller's transaction, after prune_media_lock: delete those of `ids` that may go (inbound media, and
    outbound files no message names)."""
    with conn.cursor(row_factory=class_row(PrunedMedia)) as cursor:
        return cursor.execute(db.query("prune_media_batch"), {"ids": ids}).fetchall()


def renew_media_lease(engine: sa.Engine, *, id: int, worker_id: str, lease_seconds: float) -> bool:
    """False: the lease was lost (rescued and claimed by another worker)."""
    return bool(_ids(engine, "renew_media_lease", {"id": id, "worker_id": worker_id, "lease_seconds": lease_seconds}))
