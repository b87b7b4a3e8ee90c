"""Files an app hands wa-outbox to send (issue 21, outbound): `wa_outbox.upload_media(conn, data, mime_type,
filename)` and `POST /v1/media` store the bytes (a media row, direction 'outbound', state 'stored' at once) and
answer wa-outbox's own id, which a message names as `{"type": "document", "document": {"upload": <id>, ...}}`. The
worker uploads the file to Meta once per sender, just before the first send that needs it (worker/_uploads.py).

What Meta takes, per kind (its supported media types and size caps:
https://developers.facebook.com/documentation/business-messaging/whatsapp/business-phone-numbers/media/): a file
of any other type is refused here, when it is handed over, not dead at its first send. A file is kept up to the
smaller of its kind's cap and the store's (media_store: WA_OUTBOX_MEDIA_MAX_BYTES, 16 MB by default).

Bytes move in chunks: `data` may be bytes, a binary file object (read CHUNK_BYTES at a time) or an iterator of
byte strings, and the store writes as it reads, so a large file never sits whole in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from .config import Settings
    from .enqueue import Connectable
    from .media_store import MediaStore

MB = 1024 * 1024
READ_BYTES = 1024 * 1024  # a file object is read this much at a time (media_store.CHUNK_BYTES, without its import)
# mime type -> the message type that sends it (Meta's supported media types).
KINDS: dict[str, str] = {
    "audio/aac": "audio", "audio/amr": "audio", "audio/mpeg": "audio", "audio/mp4": "audio", "audio/ogg": "audio",
    "text/plain": "document", "application/pdf": "document",
    "application/vnd.ms-powerpoint": "document", "application/msword": "document",
    "application/vnd.ms-excel": "document",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "document",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "document",
    "image/jpeg": "image", "image/png": "image",
    "image/webp": "sticker",
    "video/mp4": "video", "video/3gpp": "video",
}
# Meta's cap per kind (a sticker: 500 KB animated, 100 KB static; the larger is enforced here).
KIND_MAX_BYTES = {"audio": 16 * MB, "document": 100 * MB, "image": 5 * MB, "sticker": 500 * 1024, "video": 16 * MB}
MAX_FILENAME = 240  # Meta shows it to the recipient; a longer one is a mistake, not a name


class InvalidUpload(ValueError):
    """The file cannot be handed over; str(error) says why. Nothing was kept."""


class UploadTooLarge(InvalidUpload):
    def __init__(self, limit: int, kind: str | None = None) -> None:
        whose = f"the cap for {kind} files" if kind else "the upload cap"
        super().__init__(f"the file is larger than {limit} bytes, {whose}")
        self.limit = limit


def mime_type_of(value: Any) -> str:
    """The bare mime type (`audio/ogg; codecs=opus` -> `audio/ogg`), or InvalidUpload naming the types Meta takes."""
    mime = value.split(";", 1)[0].strip().lower() if isinstance(value, str) else ""
    if mime not in KINDS:
        shown = repr(value) if isinstance(value, str) and value else "none"
        raise InvalidUpload(f"unsupported media type {shown}: Meta sends {', '.join(sorted(KINDS))}")
    return mime


def filename_of(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_FILENAME or any(c in value for c in "\x00\r\n/\\"):
        raise InvalidUpload(f"filename must be a plain file name of at most {MAX_FILENAME} characters")
    return value


def max_bytes(kind: str, store_cap: int) -> int:
    """The largest file of `kind` wa-outbox keeps: Meta's cap for the kind, or the store's if smaller."""
    return min(KIND_MAX_BYTES[kind], store_cap)


@dataclass(frozen=True, slots=True)
class Uploaded:
    """A stored outbound file, as POST /v1/media answers it."""
    id: int
    mime_type: str
    kind: str
    size: int
    sha256: str  # hex
    filename: str | None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "mime_type": self.mime_type, "size": self.size, "sha256": self.sha256,
                "filename": self.filename}


def store(settings: Settings | None = None) -> MediaStore:
    """Where outbound files go: the store WA_OUTBOX_MEDIA_STORE names (Postgres, or a bucket), with its cap.
    `settings` None: read from the environment (an app's upload_media() runs without the service's settings)."""
    from .config import Settings  # noqa: PLC0415 - `import wa_outbox` loads no driver
    from .media_store import from_settings  # noqa: PLC0415 - as above
    return from_settings(settings or Settings.from_env(os.environ))


def chunks_of(data: Any) -> Iterator[bytes]:
    """bytes, a binary file object or an iterator of byte strings, as chunks."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        for start in range(0, len(view), READ_BYTES):
            yield bytes(view[start:start + READ_BYTES])
        return
    read = getattr(data, "read", None)
    if callable(read):
        while True:
            piece = read(READ_BYTES)
            if not piece:
                return
            if not isinstance(piece, (bytes, bytearray)):
                raise InvalidUpload("data must be opened in binary mode (its read() returned text)")
            yield bytes(piece)
    if isinstance(data, str) or not isinstance(data, Iterable):
        raise InvalidUpload("data must be bytes, a binary file object or an iterator of bytes")
    for piece in data:
        if not isinstance(piece, (bytes, bytearray, memoryview)):
            raise InvalidUpload("data's iterator must yield bytes")
        yield bytes(piece)


def _capped(chunks: Iterable[bytes], limit: int, kind: str) -> Iterator[bytes]:
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise UploadTooLarge(limit, kind)
        yield chunk


def save(conn: psycopg.Connection[Any], chunks: Iterable[bytes], mime_type: str, filename: str | None,
         target: MediaStore | None = None) -> Uploaded:
    """Store one outbound file inside `conn`'s transaction (a savepoint: a refusal midway leaves nothing); `mime_type`
    and `filename` as mime_type_of() and filename_of() returned them. UploadTooLarge past the cap."""
    from . import queries  # noqa: PLC0415 - `import wa_outbox` (an application's import) loads no SQLAlchemy
    from .media_store import TooLarge  # noqa: PLC0415 - as above (psycopg)
    target = target or store()
    kind = KINDS[mime_type]
    limit = max_bytes(kind, getattr(target, "max_bytes", KIND_MAX_BYTES[kind]))
    import psycopg  # noqa: PLC0415 - as above
    if not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # Open the caller's transaction (as any statement of theirs would): transaction() below is then a savepoint
        # inside it, not a transaction of its own that commits.
        conn.execute("SELECT 1")
    with conn.transaction():
        media_id = queries.media_outbound_insert(conn, kind=kind, mime_type=mime_type, filename=filename,
                                                 store=target.name)
        try:
            stored = target.put(conn, media_id, _capped(chunks, limit, kind))
        except TooLarge as exc:
            raise UploadTooLarge(exc.limit, kind) from None
        if stored.size == 0:
            raise InvalidUpload("the file is empty")
        queries.media_outbound_stored(conn, id=media_id, size=stored.size, sha256=stored.sha256, store=stored.store,
                                      store_key=stored.store_key)
    return Uploaded(media_id, mime_type, kind, stored.size, stored.sha256.hex(), filename)


def upload_media(conn: Connectable, data: Any, mime_type: str, filename: str | None = None) -> int:
    """Hand a file to wa-outbox inside the caller's transaction; return its id, for `{"upload": id}` in a message.

    `conn`: a psycopg 3 connection, or a SQLAlchemy Connection or Session on psycopg 3 (as enqueue() takes them).
    `data`: bytes, a binary file object or an iterator of bytes, read in chunks. `mime_type`: one Meta sends
    (KINDS). InvalidUpload (or UploadTooLarge) says what is wrong; nothing is kept then, and the caller's transaction
    goes on. A rollback of the caller's transaction removes the file with everything else."""
    mime = mime_type_of(mime_type)
    name = filename_of(filename)
    return save(_psycopg(conn), chunks_of(data), mime, name).id


def _psycopg(conn: Any) -> psycopg.Connection[Any]:
    import psycopg  # noqa: PLC0415 - `import wa_outbox` loads no driver
    import sqlalchemy as sa  # noqa: PLC0415 - as above
    from sqlalchemy.orm import Session  # noqa: PLC0415 - as above
    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, sa.engine.Connection):
        conn = conn.connection.driver_connection
    if not isinstance(conn, psycopg.Connection):
        raise TypeError("upload_media() needs a psycopg 3 connection (or a SQLAlchemy one on psycopg 3), "
                        f"not {type(conn).__name__}")
    return conn

