"""Outbound files, uploaded to Meta once per sender (issue 21): a message that names an upload
(`{"document": {"upload": 12, "filename": "invoice.pdf"}}`) is sent with Meta's media id in its place
(`{"document": {"id": "<meta media id>", ...}}`); the stored message keeps `upload`.

Each claim looks up the Meta ids its rows' files already have, per sender, in one statement (`prefetch`). A send
whose file has none (never uploaded for that sender, or its id expired) uploads it first: `POST /{phone-number-id}/
media`, the file streamed from its store, and records Meta's id for UPLOAD_VALID_SECONDS (a little less than
Meta's 30 days). One upload per file and sender however many workers send it: within a process a lock per pair;
across workers the uploading transaction holds an advisory lock on the pair (media_upload_lock.sql) until the id is
recorded, and whoever waited for it reads that id instead of uploading again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from .. import db, queries
from ..config import Settings
from ..messages import upload_of
from ..queries import Claimed
from ._classify import Action, Decision, classify_upload
from ._transport import Transport, UploadBody

log = logging.getLogger("wa_outbox.worker")

DAY = 86400.0
UPLOAD_VALID_SECONDS = 30 * DAY - DAY  # Meta keeps an uploaded id 30 days; reused for 29, then uploaded again
REUSE_MARGIN_SECONDS = 3600.0  # an id that expires sooner than this is not used for a new send: upload again
MAX_CONCURRENT_UPLOADS = 2  # per worker: each holds a pooled connection (the file streams from it) while it lasts


def upload_store(settings: Settings, name: str | None) -> Any:
    """The store an outbound file's bytes are in (media.store): the configured one, or Postgres for a file kept
    there before the deployment moved to a bucket (media_store.store_named)."""
    from ..media_store import PostgresStore, store_named  # noqa: PLC0415 - kept beside its one use
    return store_named(settings, name or PostgresStore.name)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A send's body with Meta's media id in place of `upload` (body), or why it cannot be sent (refused)."""
    body: dict[str, Any] | None
    refused: Decision | None = None
    uploaded: bool = False  # this send waited for an upload (its slot may have passed meanwhile)
    elapsed_ms: float = 0.0


def with_media_id(body: dict[str, Any], kind: str, meta_media_id: str, filename: str | None) -> dict[str, Any]:
    """The request body with `<kind>.id` in place of `<kind>.upload` (a document keeps its filename, or gets the
    file's). Pure."""
    media = {key: value for key, value in body[kind].items() if key != "upload"}
    media["id"] = meta_media_id
    if kind == "document" and filename and "filename" not in media:
        media["filename"] = filename
    return {**body, kind: media}


class Uploads:
    def __init__(self, engine: sa.Engine, transport: Transport, settings: Settings, *,
                 metrics: Any = None) -> None:
        self.settings = settings
        self.engine = engine
        self.transport = transport
        self.metrics = metrics
        self._lock = threading.Lock()
        self._known: dict[tuple[int, str], tuple[str, str | None]] = {}  # (file, sender) -> (Meta id, filename)
        self._pair_locks: dict[tuple[int, str], threading.Lock] = {}
        # pair -> (uploads tried, the last one's verdict if it failed). A send that waited for the pair's lock while
        # an upload was tried takes that verdict (retried with its own backoff, or dead), rather than trying again
        # at once; a later send (a retry after its backoff) tries again.
        self._tried: dict[tuple[int, str], tuple[int, Decision | None]] = {}
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT_UPLOADS)
        self.uploads = 0  # uploads this process made (a signal for tests)

    def prefetch(self, rows: list[Claimed]) -> None:
        """One statement per claim: the valid Meta ids of the claimed rows' files, per sender. A pair without one is
        forgotten here, so the send uploads it (again) under the locks."""
        pairs = sorted({(named[1], row.phone_number_id) for row in rows
                        if (named := upload_of(row.message)) is not None})
        if not pairs:
            return
        try:
            found = queries.media_uploads_known(self.engine, media_ids=[p[0] for p in pairs],
                                                senders=[p[1] for p in pairs], margin_s=REUSE_MARGIN_SECONDS)
        except Exception as exc:  # noqa: BLE001 - each send asks again, under its lock
            log.warning("looking up the uploads of %d files failed: %s", len(pairs), exc)
            found = []
        known = {(u.media_id, u.phone_number_id): (u.meta_media_id, u.filename) for u in found}
        with self._lock:
            for pair in pairs:
                if pair in known:
                    self._known[pair] = known[pair]
                else:
                    self._known.pop(pair, None)

    def prepare(self, row: Claimed, body: dict[str, Any], token: str | None) -> Prepared:
        """`body` ready to send: Meta's media id in place of the upload, uploading the file first if this sender has
        none. Raises for the database's trouble (the row goes back unsent)."""
        named = upload_of(row.message)
        if named is None:
            return Prepared(body)
        kind, media_id = named
        pair = (media_id, row.phone_number_id)
        with self._lock:
            known = self._known.get(pair)
            pair_lock = self._pair_locks.setdefault(pair, threading.Lock())
            tried_before = self._tried.get(pair, (0, None))[0]
        if known is not None:
            return Prepared(with_media_id(body, kind, known[0], known[1]))
        with pair_lock:  # one upload per pair in this process: the others wait here and find its id
            with self._lock:
                known = self._known.get(pair)
                tried, failed = self._tried.get(pair, (0, None))
            if known is not None:
                return Prepared(with_media_id(body, kind, known[0], known[1]), uploaded=True)
            if tried != tried_before and failed is not None:  # it failed while this send waited
                return Prepared(None, failed, uploaded=True)
            with self._slots:
                prepared = self._upload(row, body, kind, media_id, token)
            with self._lock:
                self._tried[pair] = (tried + 1, prepared.refused)
            return prepared

    def _upload(self, row: Claimed, body: dict[str, Any], kind: str, media_id: int, token: str | None) -> Prepared:
        pair = (media_id, row.phone_number_id)
        conn = self.engine.raw_connection()
        try:
            pg = db.psycopg_connection(conn)
            with pg.transaction():
                queries.media_upload_lock(pg, media_id=media_id, phone_number_id=row.phone_number_id)
                file = queries.media_upload_file(pg, media_id=media_id)
                if file is None:
                    return Prepared(None, Decision(Action.DEAD, f"file {media_id} is no longer kept (pruned?): "
                                                                "hand it over again and send a new message"))
                # Another worker may have uploaded it while this one waited for the lock.
                known = queries.media_uploads_known(pg, media_ids=[media_id],
                                                    senders=[row.phone_number_id], margin_s=REUSE_MARGIN_SECONDS)
                meta_id: str | None = known[0].meta_media_id if known else None
                if meta_id is None:
                    chunks = upload_store(self.settings, file.store).open(pg, media_id, file.store_key)
                    upload = UploadBody(chunks, file.size or 0, file.mime_type or "application/octet-stream",
                                        file.filename or f"file-{media_id}")
                    result = self.transport.upload(row.phone_number_id, upload, token)
                    meta_id, decision = classify_upload(result, media_id)
                    self._count("uploaded" if meta_id else decision.action.value)
                    if meta_id is None:
                        log.warning("sender %s: %s", row.phone_number_id, decision.reason,
                                    extra={"notification_id": row.id, "media_id": media_id})
                        return Prepared(None, decision, uploaded=True, elapsed_ms=result.elapsed_ms)
                    queries.media_upload_record(pg, media_id=media_id, phone_number_id=row.phone_number_id,
                                                meta_media_id=meta_id, valid_s=UPLOAD_VALID_SECONDS)
                    self.uploads += 1
                    log.info("file %s uploaded for sender %s (%s bytes)", media_id, row.phone_number_id, file.size,
                             extra={"notification_id": row.id, "media_id": media_id})
        finally:
            conn.close()
        assert meta_id is not None  # known, or uploaded just now
        with self._lock:
            self._known[pair] = (meta_id, file.filename)
        return Prepared(with_media_id(body, kind, meta_id, file.filename), uploaded=True)

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count("wa_outbox_media_uploads_total", outcome=outcome)

