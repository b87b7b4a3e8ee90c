"""`wa-outbox prune`'s media step: inbound media older than WA_OUTBOX_MEDIA_RETENTION_DAYS go, rows and bytes, in
small batches (each its own transaction: the rows deleted, their chunks by cascade, a bucket's objects before the
commit). Outbound media (files apps handed over) are not pruned here: queued messages may still refer to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from . import db, media_store, queries
from .config import Settings


def prune_media(engine: sa.Engine, settings: Settings, *, days: int, batch_size: int = 500,
                progress: Callable[[int], Any] | None = None) -> int:
    """Delete inbound media older than `days` days; the number deleted."""
    bucket: media_store.MediaStore | None = None
    total = 0
    while True:
        conn = engine.raw_connection()
        try:
            pg = db.psycopg_connection(conn)
            with pg.transaction():
                deleted = queries.prune_media_batch(pg, limit=batch_size, days=days)
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
        if len(deleted) < batch_size:
            return total
