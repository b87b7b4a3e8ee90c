"""Inbound media as Meta serves it: files an inbound message carries, their lookup and their download.

- `POST /_admin/inbound` with a file (JSON `{"from", "type": "image"|…, "file": {"base64", "mime_type", "filename"?},
  "caption"?}`, or multipart/form-data with a `file` part and the other keys as fields, or the raw bytes as
  application/octet-stream with the keys in the query string) keeps the file and posts the webhook of a message
  carrying its media id (`Simulator.inbound_media` in Python).
- `GET /{version}/{media-id}` (the number's token) answers as Meta does: `{"messaging_product", "url", "mime_type",
  "sha256" (hex), "file_size" (a string), "id"}`; the URL works for `media_url_ttl_s` seconds (config).
- `GET /_media/<key>` (that URL) needs the same bearer token: the bytes, streamed from disk; 404 once expired.

Faults (faults.py) with `"match": {"route": "media_lookup"}` or `"media_download"`: latency, http_error, error and
timeout on either, the lookup's own `expired_url` and `wrong_sha256`, the download's `slow_body`. Files live in a
temporary directory the library removes when the simulator stops. Meta's reference:
https://developers.facebook.com/documentation/business-messaging/whatsapp/business-phone-numbers/media/
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any

from . import errors

if TYPE_CHECKING:
    from .core import Reply, Simulator

KINDS = ("image", "audio", "video", "document", "sticker")
DOWNLOAD_PREFIX = "/_media/"
CHUNK = 1024 * 1024
MAX_UPLOAD_BYTES = 200 * 1024 * 1024  # a file POSTed to /_admin/inbound (Meta's largest document is 100 MB)
# Media ids: digits, as Meta's (e.g. 1003383421387256), from a random start.
_IDS = itertools.count(secrets.randbits(40) + 10**15)


@dataclass(frozen=True, slots=True)
class MediaFile:
    id: str
    path: str
    size: int
    sha256: bytes
    mime_type: str
    filename: str | None
    phone_number_id: str


@dataclass(frozen=True, slots=True)
class Download:
    """A download to stream: the file, and how many bytes."""
    path: str
    size: int
    mime_type: str
    pause_s: float = 0.0  # between each CHUNK of the body (a slow_body fault)


class MediaLibrary:
    """The simulator's files and the URLs it handed out; thread-safe."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._lock = threading.Lock()
        self._files: dict[str, MediaFile] = {}
        self._urls: dict[str, tuple[str, float]] = {}  # key -> (media id, expires at, monotonic)
        self.lookups: Counter[str] = Counter()
        self.downloads: Counter[str] = Counter()     # downloads answered in full, by media id

    @property
    def directory(self) -> str:
        with self._lock:
            if self._dir is None:
                self._dir = tempfile.mkdtemp(prefix="wa-outbox-simulator-media-")
            return self._dir

    def add(self, chunks: Iterable[bytes], *, mime_type: str, filename: str | None, phone_number_id: str) -> MediaFile:
        media_id = str(next(_IDS))
        path = os.path.join(self.directory, media_id)
        digest, size = hashlib.sha256(), 0
        with open(path, "wb") as out:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        media = MediaFile(media_id, path, size, digest.digest(), mime_type, filename, phone_number_id)
        with self._lock:
            self._files[media_id] = media
        return media

    def get(self, media_id: str) -> MediaFile | None:
        with self._lock:
            return self._files.get(media_id)

    def url_key(self, media_id: str, ttl_s: float) -> str:
        key = secrets.token_urlsafe(24)
        with self._lock:
            self._urls[key] = (media_id, time.monotonic() + ttl_s)
        return key

    def by_key(self, key: str) -> MediaFile | None:
        """The file a download URL names, while the URL lives."""
        with self._lock:
            found = self._urls.get(key)
            if found is None or time.monotonic() >= found[1]:
                return None
            return self._files.get(found[0])

    def counted(self, what: str, media_id: str) -> None:
        with self._lock:
            (self.lookups if what == "lookups" else self.downloads)[media_id] += 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"files": len(self._files), "lookups": dict(self.lookups), "downloads": dict(self.downloads)}

    def clear(self) -> None:
        with self._lock:
            self._urls.clear()
            self.lookups.clear()
            self.downloads.clear()

    def close(self) -> None:
        with self._lock:
            directory, self._dir = self._dir, None
            self._files.clear()
            self._urls.clear()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


# --- the Graph API side -----------------------------------------------------------------------------------------------

def lookup(simulator: Simulator, media_id: str, authorization: str | None, base_url: str) -> Reply:
    """`GET /{version}/{media-id}`."""
    from .core import Reply  # noqa: PLC0415 - core imports this module
    library = simulator.media
    media = library.get(media_id)
    if media is None:
        return _not_found(media_id)
    refused = _unauthorized(simulator, media.phone_number_id, authorization)
    if refused is not None:
        return refused
    rule, injected, delay_s = simulator.media_fault(media.phone_number_id, "media_lookup")
    if injected is not None:
        return _delayed(injected, delay_s)
    library.counted("lookups", media_id)
    ttl = 0.0 if rule is not None and rule.mode == "expired_url" else simulator.config.media_url_ttl_s
    digest = media.sha256 if rule is None or rule.mode != "wrong_sha256" else hashlib.sha256(media.sha256).digest()
    answer = {"messaging_product": "whatsapp", "url": f"{base_url}{DOWNLOAD_PREFIX}{library.url_key(media_id, ttl)}",
              "mime_type": media.mime_type, "sha256": digest.hex(), "file_size": str(media.size), "id": media_id}
    return Reply(200, json.dumps(answer, separators=(",", ":")).encode(), delay_s=delay_s)


def download(simulator: Simulator, key: str, authorization: str | None) -> Reply | Download:
    """`GET /_media/<key>`: the bytes (a Download to stream), or the Reply that refuses them."""
    from .core import Reply  # noqa: PLC0415
    media = simulator.media.by_key(key)
    if media is None:  # unknown, or past its life: as Meta's CDN, a plain 404
        return Reply(404, b'{"error":"URL signature expired"}')
    refused = _unauthorized(simulator, media.phone_number_id, authorization)
    if refused is not None:
        return refused
    rule, injected, delay_s = simulator.media_fault(media.phone_number_id, "media_download")
    if injected is not None:
        return _delayed(injected, delay_s)
    if delay_s:
        time.sleep(delay_s)
    simulator.media.counted("downloads", media.id)
    pause = rule.params["ms"] / 1000 if rule is not None and rule.mode == "slow_body" else 0.0
    return Download(media.path, media.size, media.mime_type, pause)


def _unauthorized(simulator: Simulator, phone_number_id: str, authorization: str | None) -> Reply | None:
    from .core import Reply  # noqa: PLC0415
    if simulator.authorized_for(phone_number_id, authorization):
        return None
    body = errors.graph_error(190, message="Invalid OAuth access token - Cannot parse access token")
    del body["error"]["error_data"]
    return Reply(401, json.dumps(body).encode())


def _not_found(media_id: str) -> Reply:
    from .core import Reply  # noqa: PLC0415
    body = {"error": {"message": f"Unsupported get request. Object with ID '{media_id}' does not exist, cannot be "
                                 "loaded due to missing permissions, or does not support this operation.",
                      "type": "GraphMethodException", "code": 100, "error_subcode": 33,
                      "fbtrace_id": errors.fbtrace_id()}}
    return Reply(404, json.dumps(body).encode())


def _delayed(reply: Reply, delay_s: float) -> Reply:
    import dataclasses  # noqa: PLC0415
    return dataclasses.replace(reply, delay_s=reply.delay_s + delay_s) if delay_s else reply


# --- inbound messages with a file -------------------------------------------------------------------------------------

def inbound_media(simulator: Simulator, from_: str, kind: str, chunks: Iterable[bytes], *, mime_type: str,
                  filename: str | None = None, caption: str | None = None, phone_number_id: str | None = None,
                  name: str | None = None, voice: bool = False) -> dict[str, str]:
    """Keep the file and post the webhook of a message carrying it: {"id": wamid, "media_id": …, "sha256": hex}."""
    if kind not in KINDS:
        raise ValueError(f"type must be one of {', '.join(KINDS)}")
    if not isinstance(mime_type, str) or "/" not in mime_type:
        raise ValueError("mime_type must be a MIME type such as image/jpeg")
    if not simulator.config.webhook_url:
        raise ValueError("no webhook_url configured")
    number_id = phone_number_id or simulator.config.phone_number_id
    media = simulator.media.add(chunks, mime_type=mime_type, filename=filename, phone_number_id=number_id)
    # The webhook's sha256 is base64, as Meta sends it (the lookup answers hex).
    content: dict[str, Any] = {"id": media.id, "mime_type": mime_type,
                               "sha256": base64.b64encode(media.sha256).decode()}
    if filename and kind == "document":
        content["filename"] = filename
    if caption and kind in ("image", "video", "document"):
        content["caption"] = caption
    if voice and kind == "audio":
        content["voice"] = True
    wamid = simulator.inbound(from_, phone_number_id=number_id, name=name, message={"type": kind, kind: content})
    return {"id": wamid, "media_id": media.id, "sha256": media.sha256.hex()}


_ADMIN_KEYS = {"from", "type", "file", "caption", "phone_number_id", "name", "mime_type", "filename", "voice"}


def admin_inbound(simulator: Simulator, data: dict[str, Any], chunks: Iterable[bytes] | None = None) -> dict[str, str]:
    """POST /_admin/inbound with a file: JSON `file` {"base64", "mime_type", "filename"?}, or `chunks` (the raw or
    multipart body's file) with mime_type and filename among the keys."""
    if set(data) - _ADMIN_KEYS:
        raise ValueError(f"unknown key(s): {', '.join(sorted(set(data) - _ADMIN_KEYS))}; "
                         f"known: {', '.join(sorted(_ADMIN_KEYS))}")
    mime_type, filename = data.get("mime_type"), data.get("filename")
    if chunks is None:
        file = data.get("file")
        if not isinstance(file, dict) or not isinstance(file.get("base64"), str):
            raise ValueError('file must be {"base64": "...", "mime_type": "...", "filename"?: "..."}')
        try:
            raw = base64.b64decode(file["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("file.base64 is not base64") from None
        chunks = [raw]
        mime_type, filename = file.get("mime_type", mime_type), file.get("filename", filename)
    if filename is not None and not isinstance(filename, str):
        raise ValueError("filename must be a string")
    return inbound_media(simulator, str(data.get("from") or ""), str(data.get("type") or ""), chunks,
                         mime_type=str(mime_type or ""), filename=filename, caption=data.get("caption"),
                         phone_number_id=data.get("phone_number_id"), name=data.get("name"),
                         voice=data.get("voice") in (True, "true", "1"))


def parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, Any], bytes, str | None, str | None]:
    """A multipart/form-data body: its text fields, the `file` part's bytes, its content type and file name."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode("latin-1") + body)
    fields: dict[str, Any] = {}
    file: tuple[bytes, str | None, str | None] | None = None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        payload = payload if isinstance(payload, bytes) else b""
        if name == "file":
            file = (payload, part.get_content_type(), part.get_filename())
        elif isinstance(name, str):
            fields[name] = payload.decode("utf-8", "replace")
    if file is None:
        raise ValueError("a multipart body needs a `file` part")
    return fields, file[0], file[1], file[2]
