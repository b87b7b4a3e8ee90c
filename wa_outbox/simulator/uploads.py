"""Media uploads as Meta's: `POST /{version}/{phone-number-id}/media` (multipart: messaging_product=whatsapp, type,
file) answers `{"id": "<media id>"}`, an id that number may then send (`{"document": {"id": ...}}`).
https://developers.facebook.com/documentation/business-messaging/whatsapp/business-phone-numbers/media/

The simulator keeps what it was given (number, type, size, sha256, never the bytes: tests count uploads, and a 100
MB file is not held for that) and counts uploads per number (`/_admin/stats` `uploads`). The ids it issues have a
shape of their own (ISSUED_PREFIX): a sent message naming such an id that this number was never given (another
number's upload, or one from before a restart) is refused, as Meta refuses a media id the sender cannot use; an id
of any other shape is taken as Meta's own from elsewhere (the send corpus uses such ids), as before.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..outbound_media import KIND_MAX_BYTES, KINDS

ISSUED_PREFIX = "7700"  # + 12 digits: 16, as Meta's media ids are
MAX_UPLOAD_BODY = 110 * 1024 * 1024  # Meta's largest (a 100 MB document) and the multipart around it
_SERIAL = itertools.count(secrets.randbelow(10 ** 11))
MEDIA_TYPES = ("image", "audio", "video", "document", "sticker")


class UploadRefused(ValueError):
    """Meta's refusal of an upload: (Graph error code, details)."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


@dataclass(frozen=True, slots=True)
class Upload:
    id: str
    phone_number_id: str
    mime_type: str
    size: int
    sha256: str
    filename: str | None


def parse_multipart(content_type: str | None, body: bytes) -> dict[str, tuple[dict[str, str], bytes]]:
    """The parts of a multipart/form-data body by name: (their Content-Disposition parameters and Content-Type as
    `content-type`, content). UploadRefused for anything that is not such a body."""
    kind, _, params = (content_type or "").partition(";")
    boundary = None
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary":
            boundary = value.strip('"')
    if kind.strip().lower() != "multipart/form-data" or not boundary:
        raise UploadRefused(100, "The request must be multipart/form-data.")
    delimiter = b"--" + boundary.encode("latin-1")
    parts: dict[str, tuple[dict[str, str], bytes]] = {}
    for raw in body.split(delimiter)[1:]:
        if raw.startswith(b"--"):
            break
        head, sep, content = raw.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            raise UploadRefused(100, "A multipart part has no headers.")
        headers: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-disposition":
                for item in value.split(";")[1:]:
                    key, _, val = item.strip().partition("=")
                    headers[key.lower()] = val.strip('"')
            elif name.strip().lower() == "content-type":
                headers["content-type"] = value.strip()
        if "name" in headers:
            parts[headers["name"]] = (headers, content.removesuffix(b"\r\n"))
    return parts


class UploadRegistry:
    """The uploads the simulator answered, by id, and their count per number. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uploads: dict[str, Upload] = {}
        self._counts: Counter[str] = Counter()

    def accept(self, phone_number_id: str, content_type: str | None, body: bytes) -> Upload:
        """Check an upload as Meta does and record it; UploadRefused says why not."""
        parts = parse_multipart(content_type, body)
        for required in ("messaging_product", "file"):
            if required not in parts:
                raise UploadRefused(100, f"The parameter {required} is required.")
        if parts["messaging_product"][1] != b"whatsapp":
            raise UploadRefused(100, "Param messaging_product must be one of {whatsapp}.")
        headers, content = parts["file"]
        given = parts["type"][1].decode("latin-1") if "type" in parts else headers.get("content-type", "")
        mime = given.split(";", 1)[0].strip().lower()
        if mime not in KINDS:
            raise UploadRefused(131053, f"Unsupported media type {given!r}.")
        limit = KIND_MAX_BYTES[KINDS[mime]]
        if not content or len(content) > limit:
            raise UploadRefused(131053, f"The file must be 1 to {limit} bytes for {mime}, got {len(content)}.")
        upload = Upload(f"{ISSUED_PREFIX}{next(_SERIAL) % 10 ** 12:012d}", phone_number_id, mime, len(content),
                        hashlib.sha256(content).hexdigest(), headers.get("filename"))
        with self._lock:
            self._uploads[upload.id] = upload
            self._counts[phone_number_id] += 1
        return upload

    def refusal(self, phone_number_id: str, body: Any) -> str | None:
        """Why a sent message's media id cannot be used by this number (details), or None."""
        if not isinstance(body, dict):
            return None
        kind = body.get("type")
        media = body.get(kind) if isinstance(kind, str) and kind in MEDIA_TYPES else None
        media_id = media.get("id") if isinstance(media, dict) else None
        if not isinstance(media_id, str) or not media_id.startswith(ISSUED_PREFIX):
            return None
        with self._lock:
            upload = self._uploads.get(media_id)
        if upload is None or upload.phone_number_id != phone_number_id:
            return f"Param {kind}['id'] is not a valid media id for this phone number."
        return None

    def get(self, media_id: str) -> Upload | None:
        with self._lock:
            return self._uploads.get(media_id)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"total": sum(self._counts.values()), "by_phone_number_id": dict(self._counts)}

    def clear(self) -> None:
        with self._lock:
            self._uploads.clear()
            self._counts.clear()
