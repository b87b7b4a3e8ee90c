"""Inbound media, decided: which messages carry media, what Meta's answers to a lookup (`GET /{media-id}`) and to a
download mean, whether the bytes are the ones Meta declared, and when to try again or give up. Pure: no I/O, tested
without a database (tests/unit/test_media_policy.py). The worker (worker/_media.py) acts on these decisions.

Meta's rules (https://developers.facebook.com/documentation/business-messaging/whatsapp/business-phone-numbers/media/):
a media id from a webhook can be fetched for 7 days; the lookup answers `url`, `mime_type`, `sha256`, `file_size`,
and the `url` lives about 5 minutes; its download needs the same bearer token. The webhook's `sha256` is base64, the
lookup's hex in Meta's answers: both are read.
"""

from __future__ import annotations

import base64
import binascii
import enum
import re
from dataclasses import dataclass
from typing import Any

from .retry import backoff_seconds

MEDIA_KINDS = ("image", "audio", "video", "document", "sticker")
ID_LIFETIME_SECONDS = 7 * 86400      # a webhook's media id is fetchable this long from its message
URL_RETRIES = 2                      # a download URL refused (expired) is looked up again this many times at once
MAX_CORRUPT_ATTEMPTS = 5             # downloads whose bytes do not match Meta's sha256 or size: failed at this many
MAX_ID_CHARS = 128
MAX_MIME_CHARS = 255
MAX_FILENAME_CHARS = 1024
# A sender's token refused (190, 0, 401): the sender is paused as a send would pause it, and its media wait as long.
TOKEN_CODES = frozenset({0, 190})
TOKEN_PAUSE_SECONDS = 300.0          # the same as worker/_classify.py BROKEN_SENDER_PAUSE_SECONDS
_HEX = re.compile(r"[0-9a-fA-F]{64}")


class MediaState(enum.StrEnum):
    """media.state (the CHECK of wa_outbox.media in sql/schema.sql)."""
    PENDING = "pending"
    FETCHING = "fetching"
    STORED = "stored"
    FAILED = "failed"
    EXPIRED = "expired"
    TOO_LARGE = "too_large"


def media_of(message: Any) -> dict[str, Any] | None:
    """The media an inbound message carries (image, audio, video, document, sticker), as the row to create
    (`media_id`, `kind`, `mime_type`, `sha256`, `filename`), or None when it carries none or its id is garbage."""
    if not isinstance(message, dict):
        return None
    kind = message.get("type")
    if kind not in MEDIA_KINDS:
        return None
    media = message.get(kind)
    if not isinstance(media, dict):
        return None
    media_id = media.get("id")
    if isinstance(media_id, int) and not isinstance(media_id, bool):
        media_id = str(media_id)
    if not isinstance(media_id, str) or not 0 < len(media_id) <= MAX_ID_CHARS or not media_id.isprintable():
        return None

    def text(key: str, limit: int) -> str | None:
        value = media.get(key)
        return value[:limit] if isinstance(value, str) and value else None
    return {"media_id": media_id, "kind": kind, "mime_type": text("mime_type", MAX_MIME_CHARS),
            "sha256": text("sha256", 128), "filename": text("filename", MAX_FILENAME_CHARS)}


def decode_sha256(value: Any) -> bytes | None:
    """A declared SHA-256 as its 32 bytes: hex (the lookup's) or base64 (the webhook's); None when it is neither."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    if _HEX.fullmatch(value):
        return bytes.fromhex(value)
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_" if ("-" in value or "_" in value)
                               else None, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 else None


def next_try_in(attempts: int, seconds_left: float, *, base: float, cap: float) -> float | None:
    """After `attempts` failed fetches, seconds until the next, or None when the media id will no longer be
    fetchable by then (`seconds_left`: until its fetch_until): the media is then `expired`."""
    delay = backoff_seconds(attempts, base=base, cap=cap)
    return delay if delay < seconds_left else None


class Verdict(enum.Enum):
    OK = "ok"                  # go on (the lookup's URL, or the bytes)
    RETRY = "retry"            # transient (5xx, 429, a network failure, Meta's transient codes): back off
    GONE = "gone"              # the id is unknown or deleted (404, #100): final, `failed`
    TOKEN = "token"            # the sender's token is refused (401, 190): pause the sender, not the queue
    URL_EXPIRED = "url"        # the download URL no longer works: look the id up again
    TOO_LARGE = "too_large"    # larger than the store's cap: recorded, never fetched


@dataclass(frozen=True, slots=True)
class Lookup:
    verdict: Verdict
    reason: str
    url: str | None = None           # never logged, never stored: a bearer credential for minutes
    mime_type: str | None = None
    sha256: str | None = None        # as Meta wrote it
    file_size: int | None = None
    code: int | None = None


# Meta's codes that are worth another try (worker/_classify.py RETRYABLE, plus the rate limits: a lookup is no send).
_RETRY_CODES = frozenset({1, 2, 4, 80007, 130429, 131000, 131016, 133004, 131057})


def judge_lookup(status: int | None, body: Any, max_bytes: int | None = None) -> Lookup:
    """What `GET /{media-id}` answered (status None: no answer at all) means."""
    if status is None:
        return Lookup(Verdict.RETRY, "no answer from the Graph API")
    body = body if isinstance(body, dict) else {}
    if 200 <= status < 300:
        url = body.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return Lookup(Verdict.RETRY, f"HTTP {status} without a download URL")
        size = body.get("file_size")
        try:
            file_size = int(size) if size is not None and not isinstance(size, bool) else None
        except (TypeError, ValueError):
            file_size = None
        mime = body.get("mime_type") if isinstance(body.get("mime_type"), str) else None
        sha = body.get("sha256") if isinstance(body.get("sha256"), str) else None
        if max_bytes is not None and file_size is not None and file_size > max_bytes:
            return Lookup(Verdict.TOO_LARGE, f"{file_size} bytes, over the media size cap of {max_bytes}",
                          mime_type=mime, sha256=sha, file_size=file_size)
        return Lookup(Verdict.OK, "found", url=url, mime_type=mime, sha256=sha, file_size=file_size)
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    code = error.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    message = error.get("message")
    message = message if isinstance(message, str) else ""
    reason = (f"{code}: {message[:300]}" if code is not None else f"HTTP {status}") + f" (HTTP {status})"
    if status == 401 or code in TOKEN_CODES:
        return Lookup(Verdict.TOKEN, reason, code=code)
    if code in _RETRY_CODES or status == 429 or status >= 500:
        return Lookup(Verdict.RETRY, reason, code=code)
    if status in (400, 404, 410) or code == 100:
        return Lookup(Verdict.GONE, reason, code=code)
    return Lookup(Verdict.RETRY, reason, code=code)


def judge_download(status: int | None) -> Verdict:
    """What the download's answer (its status; None: no answer) means, before any byte is read."""
    if status is None or status >= 500 or status == 429:
        return Verdict.RETRY
    if 200 <= status < 300:
        return Verdict.OK
    if status == 401:
        return Verdict.TOKEN
    return Verdict.URL_EXPIRED  # 403, 404, 410: the URL's signature is past its life: a fresh lookup gives another


def check_bytes(got_size: int, got_sha256: bytes, *, file_size: int | None,
                declared: list[str | None]) -> str | None:
    """Why the bytes downloaded are not the ones Meta declared (the lookup's size, any sha256 it or the webhook
    gave), or None when they are."""
    if file_size is not None and got_size != file_size:
        return f"{got_size} bytes downloaded, Meta declared {file_size}"
    for value in declared:
        want = decode_sha256(value)
        if want is not None and want != got_sha256:
            return "the bytes downloaded do not match the sha256 Meta declared"
    return None


def after_failure(verdict: Verdict, attempts: int, seconds_left: float, *, base: float, cap: float,
                  corrupt_fetches: int = 0) -> tuple[MediaState, float | None]:
    """The state a fetch that failed leaves its media in, and the delay before the next try (pending only).
    `corrupt_fetches`: the downloads so far, this one included, whose bytes were not the ones Meta declared. Only
    those count towards giving up as `failed`: a media whose attempts went on 503s and outages and whose bytes were
    wrong once is fetched again like any other."""
    if verdict is Verdict.GONE:
        return MediaState.FAILED, None
    if verdict is Verdict.TOO_LARGE:
        return MediaState.TOO_LARGE, None
    if corrupt_fetches >= MAX_CORRUPT_ATTEMPTS:
        return MediaState.FAILED, None
    if verdict is Verdict.TOKEN:
        delay: float | None = TOKEN_PAUSE_SECONDS if TOKEN_PAUSE_SECONDS < seconds_left else None
    else:
        delay = next_try_in(attempts, seconds_left, base=base, cap=cap)
    if delay is None:
        return MediaState.EXPIRED, None
    return MediaState.PENDING, delay
