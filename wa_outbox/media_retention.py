"""`wa-outbox prune`'s media step: media older than WA_OUTBOX_MEDIA_RETENTION_DAYS go, rows and bytes, in small
batches (each its own transaction: the rows locked, then deleted, their chunks and uploads by cascade, a bucket's
objects before the commit). Inbound media go by age alone; an outbound file (one an app handed over) also only once
no message names it: not one still queued, dead or kept for its own retention (so a file reused every day, a
brochure, stays while it is used; prune's message step runs first)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from . import db, media_store, queries
from .config import Settings


def prune_media(engine: sa.Engine, settings: Settings, *, days: int, batch_size: int = 500,
                progress: Callable[[int], Any] | None = None) -> int:
    """Delete the media older than `days` days that may go; the number deleted."""
    bucket: media_store.MediaStore | None = None
    total = 0
    after_at, after_id = datetime.min.replace(tzinfo=UTC), 0  # files still named are passed over, not read again
    while True:
        conn = engine.raw_connection()
        try:
            pg = db.psycopg_connection(conn)
            with pg.transaction():
                locked = queries.prune_media_lock(pg, limit=batch_size, days=days, after_at=after_at,
                                                  after_id=after_id)
                deleted = queries.prune_media_batch(pg, ids=[m.id for m in locked]) if locked else []
                for row in deleted:
                    if row.store == media_store.S3Store.name and row.store_key:
                        if bucket is None:
                            bucket = media_store.store_named(settings, media_store.S3Store.name)
                        bucket.delete(pg, row.id, row.store_key)
        finally:
            conn.close()
        total += len(deleted)
        if progress is not None:
            progress(total)
        if len(locked) < batch_size:
            return total
        after_at, after_id = locked[-1].created_at, locked[-1].id
