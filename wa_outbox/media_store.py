"""Where media bytes live: Postgres (the default: table media_chunks) or an S3-compatible bucket.

Bytes move in chunks both ways (CHUNK_BYTES at a time), so a 100 MB document never sits whole in a worker's or a web
process's memory: `put()` consumes an iterator of byte strings and writes as it goes; `open()` yields the stored
bytes chunk by chunk. Both take the caller's psycopg connection, so an app's `upload_media()` stores its file inside
the app's own transaction (for Postgres; a bucket's object is written at once, and prune removes an object whose row
never committed).

The media row (table media) is owned by its callers: this module only writes and reads bytes for a media id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

if TYPE_CHECKING:
    from .config import Settings

CHUNK_BYTES = 1024 * 1024  # one media_chunks row; also the read size of downloads
DEFAULT_MAX_BYTES = 16 * 1024 * 1024  # WA_OUTBOX_MEDIA_MAX_BYTES: the Postgres store's size cap
# A bucket's default cap: Meta's largest media (documents, 100 MB:
# https://developers.facebook.com/documentation/business-messaging/whatsapp/business-phone-numbers/media/).
S3_DEFAULT_MAX_BYTES = 100 * 1024 * 1024
S3_PART_BYTES = 5 * 1024 * 1024  # a multipart upload's part (S3's least, but for the last): held one at a time
PRESIGNED_SECONDS = 300          # a GET /v1/media redirect's life


class TooLarge(Exception):
    """The bytes passed the store's size cap; nothing was kept (the caller records the media as too_large)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than the media size cap of {limit} bytes")
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Stored:
    store: str               # 'postgres' | 's3': media.store
    store_key: str | None    # media.store_key
    size: int
    sha256: bytes            # of the bytes as stored (compare with what Meta declared)


class MediaStore(Protocol):
    name: str
    max_bytes: int

    def put(self, conn: psycopg.Connection[Any], media_id: int, chunks: Iterable[bytes]) -> Stored: ...

    def open(self, conn: psycopg.Connection[Any], media_id: int, store_key: str | None,
             start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes [start, end) (end None: to the end), chunk by chunk."""
        ...

    def delete(self, conn: psycopg.Connection[Any], media_id: int, store_key: str | None) -> None: ...


def rechunk(chunks: Iterable[bytes], size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Chunks of exactly `size` bytes (the last one shorter) from chunks of any size, holding at most one."""
    buf = bytearray()
    for piece in chunks:
        buf += piece
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    if buf:
        yield bytes(buf)


class PostgresStore:
    """Bytes in wa_outbox.media_chunks, one row per CHUNK_BYTES, under a size cap."""

    name = "postgres"

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def put(self, conn: psycopg.Connection[Any], media_id: int, chunks: Iterable[bytes]) -> Stored:
        digest = hashlib.sha256()
        size = 0
        with conn.transaction():  # a savepoint inside the caller's transaction: too large leaves no chunk behind
            conn.execute("DELETE FROM wa_outbox.media_chunks WHERE media_id = %s", (media_id,))
            for seq, chunk in enumerate(rechunk(chunks)):
                size += len(chunk)
                if size > self.max_bytes:
                    raise TooLarge(self.max_bytes)
                digest.update(chunk)
                conn.execute("INSERT INTO wa_outbox.media_chunks (media_id, seq, data) VALUES (%s, %s, %s)",
                             (media_id, seq, chunk))
        return Stored(store=self.name, store_key=None, size=size, sha256=digest.digest())

    def open(self, conn: psycopg.Connection[Any], media_id: int, store_key: str | None,
             start: int = 0, end: int | None = None) -> Iterator[bytes]:
        # Chunks are CHUNK_BYTES each but the last, so a byte range maps onto chunk numbers without reading others.
        seq = start // CHUNK_BYTES
        skip = start - seq * CHUNK_BYTES
        left = None if end is None else end - start
        while left is None or left > 0:
            row = conn.execute("SELECT data FROM wa_outbox.media_chunks WHERE media_id = %s AND seq = %s",
                               (media_id, seq)).fetchone()
            if row is None:
                return
            data = bytes(row[0])[skip:]
            skip = 0
            if left is not None:
                data = data[:left]
                left -= len(data)
            if data:
                yield data
            seq += 1

    def delete(self, conn: psycopg.Connection[Any], media_id: int, store_key: str | None) -> None:
        conn.execute("DELETE FROM wa_outbox.media_chunks WHERE media_id = %s", (media_id,))


class S3Store:
    """Bytes in an S3-compatible bucket, one object per media (key `<prefix>/<media id>`), written by a multipart
    upload one part at a time, read by ranged GETs. The endpoint and credentials are boto3's own (AWS_ENDPOINT_URL,
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION / AWS_DEFAULT_REGION, or an instance role)."""

    name = "s3"

    def __init__(self, bucket: str, prefix: str = "", max_bytes: int = S3_DEFAULT_MAX_BYTES,
                 client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.max_bytes = max_bytes
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3  # noqa: PLC0415 - only a deployment with a bucket imports boto3 (a second of start-up)
            self._client = boto3.client("s3")
        return self._client

    def key_of(self, media_id: int) -> str:
        return f"{self.prefix}/{media_id}" if self.prefix else str(media_id)

    def put(self, conn: psycopg.Connection[Any], media_id: int, chunks: Iterable[bytes]) -> Stored:
        key = self.key_of(media_id)
        digest = hashlib.sha256()
        size = 0
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        parts = []
        try:
            for number, part in enumerate(rechunk(chunks, S3_PART_BYTES), start=1):
                size += len(part)
                if size > self.max_bytes:
                    raise TooLarge(self.max_bytes)
                digest.update(part)
                answer = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number,
                                                 Body=part)
                parts.append({"PartNumber": number, "ETag": answer["ETag"]})
            if not parts:  # an empty file: a multipart upload needs a part
                answer = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=1,
                                                 Body=b"")
                parts.append({"PartNumber": 1, "ETag": answer["ETag"]})
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload,
                                                  MultipartUpload={"Parts": parts})
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            except Exception:  # noqa: BLE001 - the first failure is the one to report; a lifecycle rule ends it
                pass
            raise
        return Stored(store=self.name, store_key=key, size=size, sha256=digest.digest())

    def open(self, conn: psycopg.Connection[Any], media_id: int, store_key: str | None,
             start: int = 0, end: int | None = None) -> Iterator[bytes]:
        if end is not None and end <= start:
            return
        byte_range = f"bytes={start}-" + ("" if end is None else str(end - 1))
        body = self.client.get_object(Bucket=self.bucket, Key=store_key or self.key_of(media_id),
                                      Range=byte_range)["Body"]
        try:
            yield from body.iter_chunks(CHUNK_BYTES)
        finally:
            body.close()

    def delete(self, conn: psycopg.Connection[Any], media_id: int, store_key: str | None) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=store_key or self.key_of(media_id))

    def presigned_url(self, store_key: str, *, mime_type: str | None, filename: str | None = None,
                      seconds: int = PRESIGNED_SECONDS) -> str:
        """A GET URL for the object that lives `seconds` (GET /v1/media redirects there)."""
        params: dict[str, str] = {"Bucket": self.bucket, "Key": store_key}
        if mime_type:
            params["ResponseContentType"] = mime_type
        if filename:
            params["ResponseContentDisposition"] = content_disposition(filename)
        return str(self.client.generate_presigned_url("get_object", Params=params, ExpiresIn=seconds))


_S3_URL = re.compile(r"s3://([^/?#]+)(?:/([^?#]*))?")


def content_disposition(filename: str) -> str:
    """`attachment` with the file's name, RFC 6266's two forms (ASCII fallback and UTF-8)."""
    from urllib.parse import quote  # noqa: PLC0415
    fallback = re.sub(r'[^A-Za-z0-9._ -]', "_", filename)[:200] or "file"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename[:200], safe='')}"


def from_settings(settings: Settings) -> MediaStore:
    """The store WA_OUTBOX_MEDIA_STORE names (validated by config.py), with WA_OUTBOX_MEDIA_MAX_BYTES' cap, or the
    store's default cap when it is unset (16 MB in Postgres, 100 MB in a bucket)."""
    configured = settings.media_store
    match = _S3_URL.fullmatch(configured)
    if match is not None:
        return S3Store(match[1], match[2] or "", settings.media_max_bytes or S3_DEFAULT_MAX_BYTES)
    return PostgresStore(settings.media_max_bytes or DEFAULT_MAX_BYTES)


def store_named(settings: Settings, name: str) -> MediaStore:
    """The store a media row names (media.store): the configured one, or Postgres for rows written before a move to
    a bucket (their chunks are still in media_chunks)."""
    store = from_settings(settings)
    if store.name == name:
        return store
    if name == PostgresStore.name:
        return PostgresStore(settings.media_max_bytes or DEFAULT_MAX_BYTES)
    raise ValueError(f"media kept in store {name!r}, but WA_OUTBOX_MEDIA_STORE is {settings.media_store}")
