"""Media for apps over HTTP, behind the same bearer tokens as the rest of /v1.

GET /v1/media/<id>   (Meta's media id as the webhook carried it, or wa-outbox's own id)
    → the bytes, streamed a chunk at a time (Content-Type, Content-Length, Accept-Ranges; `Range: bytes=…` → 206),
      or, for media in a bucket, 302 to a presigned URL of the object (PRESIGNED_SECONDS); before the bytes are kept:
      404 {"error": {…}, "state": pending | failed | expired | too_large}; an unknown id: 404 without a state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, redirect, request

from .. import db, media_read, media_store, queries
from ..media_policy import MediaState
from . import api_views
from .app_state import engine_of, settings_of
from .errors import json_error

blueprint = Blueprint("media_download", __name__, url_prefix="/v1/media")
blueprint.before_request(api_views.require_token)
MAX_ID_CHARS = 128


@blueprint.get("/<path:media_id>")
def get_media(media_id: str):
    if not 0 < len(media_id) <= MAX_ID_CHARS or not media_id.isprintable():
        return json_error(400, "not a media id")
    engine = engine_of(current_app)
    row = queries.get_media(engine, given=media_id)
    if row is None:
        return json_error(404, f"no media has the id {media_id}")
    if row.state != MediaState.STORED or row.size is None:
        state = media_read.shown_state(row)
        body = {"error": {"status": 404, "message": f"media {media_id} is not stored: {state}", "state": state},
                "state": state}
        return jsonify(body), 404
    try:
        store = _store(row.store or media_store.PostgresStore.name)
    except ValueError as exc:
        return json_error(409, str(exc))
    mime = row.mime_type or "application/octet-stream"
    if isinstance(store, media_store.S3Store) and row.store_key:
        return redirect(store.presigned_url(row.store_key, mime_type=mime, filename=row.filename), 302)
    try:
        byte_range = media_read.parse_range(request.headers.get("Range"), row.size)
    except media_read.Unsatisfiable as exc:
        response, status = json_error(416, str(exc))
        response.headers["Content-Range"] = f"bytes */{row.size}"
        return response, status
    start, end = byte_range or (0, row.size)
    headers = {"Content-Length": str(end - start), "Accept-Ranges": "bytes", "Cache-Control": "private",
               "X-Content-Type-Options": "nosniff"}
    if row.filename:
        headers["Content-Disposition"] = media_store.content_disposition(row.filename)
    if byte_range is not None:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{row.size}"
    chunks = _bytes(engine, store, row, start, end) if request.method != "HEAD" else iter(())
    return Response(chunks, status=206 if byte_range is not None else 200, mimetype=None, content_type=mime,
                    headers=headers, direct_passthrough=True)


def _store(name: str) -> media_store.MediaStore:
    """The store a row names, made once per app (a bucket's boto3 client is thread-safe and slow to make)."""
    stores = current_app.extensions.setdefault("wa_outbox.media_stores", {})
    if name not in stores:
        stores[name] = media_store.store_named(settings_of(current_app), name)
    return stores[name]


def _bytes(engine: Any, store: media_store.MediaStore, row: queries.MediaRow, start: int, end: int) -> Iterator[bytes]:
    """The bytes, a chunk at a time, each read on a pooled connection taken for that chunk only: a slow client
    holds no connection the webhooks need while its socket drains."""
    position = start
    while position < end:
        upto = min(end, (position // media_store.CHUNK_BYTES + 1) * media_store.CHUNK_BYTES)
        conn = engine.raw_connection()
        try:
            pieces = list(store.open(db.psycopg_connection(conn), row.id, row.store_key, position, upto))
        finally:
            conn.close()
        if not pieces:
            return  # the bytes went meanwhile (pruned): the response ends short, as its Content-Length shows
        for piece in pieces:
            position += len(piece)
            yield piece
