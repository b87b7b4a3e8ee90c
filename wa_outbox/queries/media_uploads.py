"""Outbound media: the files apps hand over (media rows, direction 'outbound') and their uploads to Meta per sender
(media_uploads). All but media_uploads_known run on the caller's psycopg connection, inside its transaction:
upload_media() writes in the app's, and the worker's upload holds its lock for as long as it uploads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row

from .. import db
from ._run import _conn_one, _rows


@dataclass(frozen=True, slots=True)
class MediaId:
    id: int


def media_outbound_insert(conn: psycopg.Connection[Any], *, kind: str, mime_type: str, filename: str | None,
                          store: str) -> int:
    return _conn_one(conn, "media_outbound_insert", MediaId,
                     {"kind": kind, "mime_type": mime_type, "filename": filename, "store": store}).id


def media_outbound_stored(conn: psycopg.Connection[Any], *, id: int, size: int, sha256: bytes, store: str,
                          store_key: str | None) -> None:
    conn.execute(db.query("media_outbound_stored"),
                 {"id": id, "size": size, "sha256": sha256, "store": store, "store_key": store_key})


@dataclass(frozen=True, slots=True)
class KnownUpload:
    media_id: int
    phone_number_id: str
    meta_media_id: str
    filename: str | None


def media_uploads_known(source: sa.Engine | psycopg.Connection[Any], *, media_ids: list[int], senders: list[str],
                        margin_s: float) -> list[KnownUpload]:
    """`source`: the pool (a claim's lookup), or the connection of the transaction that holds the pair's lock."""
    params = {"media_ids": media_ids, "senders": senders, "margin_s": margin_s}
    if isinstance(source, sa.Engine):
        return _rows(source, "media_uploads_known", KnownUpload, params)
    with source.cursor(row_factory=class_row(KnownUpload)) as cursor:
        return cursor.execute(db.query("media_uploads_known"), params).fetchall()


def media_upload_lock(conn: psycopg.Connection[Any], *, media_id: int, phone_number_id: str) -> None:
    conn.execute(db.query("media_upload_lock"), {"media_id": media_id, "phone_number_id": phone_number_id})


@dataclass(frozen=True, slots=True)
class UploadFile:
    id: int
    kind: str | None
    mime_type: str | None
    filename: str | None
    size: int | None
    store: str | None
    store_key: str | None


def media_upload_file(conn: psycopg.Connection[Any], *, media_id: int) -> UploadFile | None:
    with conn.cursor(row_factory=class_row(UploadFile)) as cursor:
        return cursor.execute(db.query("media_upload_file"), {"media_id": media_id}).fetchone()


@dataclass(frozen=True, slots=True)
class UploadRecorded:
    expires_at: datetime


def media_upload_record(conn: psycopg.Connection[Any], *, media_id: int, phone_number_id: str, meta_media_id: str,
                        valid_s: float) -> UploadRecorded:
    return _conn_one(conn, "media_upload_record", UploadRecorded,
                     {"media_id": media_id, "phone_number_id": phone_number_id, "meta_media_id": meta_media_id,
                      "valid_s": valid_s})
