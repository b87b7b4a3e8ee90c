"""The Cloud API call: one pooled `requests.Session`, connection-level retries only where nothing was sent.

`send()` never raises for network trouble: it reports what happened as a SendResult, for `classify()` to judge.
Whether a failed request may have reached Meta is the distinction that matters: a refused or timed-out *connect*
sent nothing (safe to retry, and urllib3 retries it at once); a *read* timeout or a dropped connection happened
after the body went out (ambiguous: never retried blindly).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import NewConnectionError
from urllib3.util.retry import Retry

from ._classify import SendResult


class SlotMissed(Exception):
    """The request was not sent: it would have gone after `not_after` (its send slot has slipped too far behind for
    the rate to hold). Nothing went on the wire."""

    def __init__(self, late_seconds: float):
        super().__init__(f"{late_seconds * 1000:.0f} ms past its deadline")
        self.late_seconds = late_seconds


class Transport(Protocol):
    def send(self, phone_number_id: str, body: dict[str, Any], token: str | None = None,
             not_after: float | None = None) -> SendResult:
        """`not_after` (time.time() seconds): the request goes only if it can start by then; else SlotMissed."""
        ...

    def upload(self, phone_number_id: str, file: UploadBody, token: str | None = None) -> SendResult: ...

    def close(self) -> None: ...


class GraphTransport:
    """Every request carries its sender's token (`token`, in its own Authorization header) over one pooled session;
    `access_token`, the session's header, is for a caller that names none."""

    def __init__(self, base_url: str, access_token: str, *, pool_size: int, connect_timeout: float = 5.0,
                 read_timeout: float = 15.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = (connect_timeout, read_timeout)
        self.session = requests.Session()
        # Retry only failures to connect (nothing was sent); never reads, never statuses: those are ours to judge.
        retry = Retry(total=2, connect=2, read=0, status=0, other=0, redirect=0, backoff_factor=0.1,
                      allowed_methods=None, raise_on_status=False)
        adapter = _DeadlineAdapter(pool_connections=4, pool_maxsize=pool_size, max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update({"Authorization": f"Bearer {access_token}",
                                     "Content-Type": "application/json", "User-Agent": "wa-outbox"})
        # The environment is read once, here, not on every send (requests would look up .netrc and the proxy
        # variables per request — a fifth of a worker's CPU — and a .netrc entry would replace our token).
        self.session.trust_env = False
        self.session.proxies.update(requests.utils.get_environ_proxies(self.base_url))
        ca_bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if ca_bundle:
            self.session.verify = ca_bundle

    def send(self, phone_number_id: str, body: dict[str, Any], token: str | None = None,
             not_after: float | None = None) -> SendResult:
        started = time.perf_counter()
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        _deadline.not_after = not_after  # read by _DeadlineAdapter.send, on this thread, just before the request
        _deadline.request_at = None
        try:
            response = self.session.post(f"{self.base_url}/{phone_number_id}/messages", data=data,
                                         headers=headers, timeout=self.timeout)
        except requests.exceptions.ConnectTimeout as exc:
            return _failed("connect", exc, started)
        except requests.exceptions.ReadTimeout as exc:
            return _failed("read_timeout", exc, started)
        except requests.exceptions.SSLError as exc:
            return _failed("connect", exc, started)
        except requests.exceptions.ConnectionError as exc:
            return _failed("connect" if _never_connected(exc) else "connection_lost", exc, started)
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
            return _failed("connection_lost", exc, started)
        elapsed_ms = (time.perf_counter() - started) * 1000
        try:
            payload = response.json()
            failure = None
        except ValueError:
            payload, failure = None, "bad_response"
        return SendResult(http_status=response.status_code, body=payload, failure=failure,
                          failure_detail=response.text[:200] if failure else None,
                          retry_after=_retry_after(response.headers.get("Retry-After")), elapsed_ms=elapsed_ms,
                          request_at=getattr(_deadline, "request_at", None))

    def upload(self, phone_number_id: str, file: UploadBody, token: str | None = None) -> SendResult:
        """`POST /{phone-number-id}/media` with the file streamed from its store (UploadBody): Meta's media id in
        the answer (`{"id": ...}`), or what went wrong, for classify_upload(). A large file may take longer than a
        send: the read timeout is at least UPLOAD_READ_TIMEOUT."""
        started = time.perf_counter()
        headers = {"Content-Type": file.content_type, "Content-Length": str(len(file))}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        try:
            response = self.session.post(f"{self.base_url}/{phone_number_id}/media", data=file, headers=headers,
                                         timeout=(self.timeout[0], max(self.timeout[1], UPLOAD_READ_TIMEOUT)))
        except requests.exceptions.ConnectTimeout as exc:
            return _failed("connect", exc, started)
        except requests.exceptions.ReadTimeout as exc:
            return _failed("read_timeout", exc, started)
        except requests.exceptions.ConnectionError as exc:
            return _failed("connect" if _never_connected(exc) else "connection_lost", exc, started)
        except requests.exceptions.RequestException as exc:
            return _failed("connection_lost", exc, started)
        try:
            payload = response.json()
            failure = None
        except ValueError:
            payload, failure = None, "bad_response"
        return SendResult(http_status=response.status_code, body=payload, failure=failure,
                          failure_detail=response.text[:200] if failure else None,
                          retry_after=_retry_after(response.headers.get("Retry-After")),
                          elapsed_ms=(time.perf_counter() - started) * 1000)

    def close(self) -> None:
        self.session.close()


class DryRunTransport:
    """Accepts everything without a network call: the queue machinery alone (staging, benchmarks). `not_after` is
    ignored: nothing reaches Meta, so there is no window to keep."""

    def send(self, phone_number_id: str, body: dict[str, Any], token: str | None = None,
             not_after: float | None = None) -> SendResult:
        wamid = f"wamid.dryrun.{body.get('biz_opaque_callback_data')}"
        return SendResult(http_status=200, body={"messages": [{"id": wamid}]})

    def upload(self, phone_number_id: str, file: UploadBody, token: str | None = None) -> SendResult:
        return SendResult(http_status=200, body={"id": f"dryrun.{secrets.token_hex(8)}"})

    def close(self) -> None:
        pass


_deadline = threading.local()


class _DeadlineAdapter(HTTPAdapter):
    """The last moment before a request goes out (after requests has prepared it, before urllib3 takes a connection
    and writes it): a send whose deadline (GraphTransport.send's `not_after`) has passed is not made (SlotMissed).
    The deadline is the sender's own knowledge of when it actually sends (worker/_sender.py: a send slot that has
    slipped is re-slotted, not sent late)."""

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        not_after = getattr(_deadline, "not_after", None)
        if not_after is not None:
            _deadline.not_after = None  # once per send: urllib3's connect retries are the same request
            late = time.time() - not_after
            if late > 0:
                raise SlotMissed(late)
        _deadline.request_at = time.time()
        return super().send(request, *args, **kwargs)
UPLOAD_READ_TIMEOUT = 120.0  # seconds for Meta's answer to an upload of up to 100 MB


class UploadBody:
    """A multipart/form-data body (messaging_product, type, file) produced as it is read, so a file streams from
    its store to Meta a chunk at a time. Its length is known up front (the file's size is), so it goes with a
    Content-Length, not chunked: requests sizes it with len() and reads it with read(n)."""

    def __init__(self, chunks: Iterator[bytes], size: int, mime_type: str, filename: str) -> None:
        self.boundary = "wa-outbox-" + secrets.token_hex(16)
        quoted = filename.replace("\\", "_").replace('"', "_")
        head = "".join(f'--{self.boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                       for name, value in (("messaging_product", "whatsapp"), ("type", mime_type)))
        head += (f'--{self.boundary}\r\nContent-Disposition: form-data; name="file"; filename="{quoted}"\r\n'
                 f"Content-Type: {mime_type}\r\n\r\n")
        self._head = head.encode()
        self._tail = f"\r\n--{self.boundary}--\r\n".encode()
        self._chunks = chunks
        self._size = size
        self._sent_file = 0
        self._stage = 0        # 0: head, 1: file, 2: tail, 3: done
        self._piece = b""      # the piece being read, from offset _at
        self._at = 0

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def __len__(self) -> int:
        return len(self._head) + self._size + len(self._tail)

    def _next_piece(self) -> bytes:
        if self._stage == 0:
            self._stage = 1
            return self._head
        if self._stage == 1:
            for chunk in self._chunks:
                if chunk:
                    self._sent_file += len(chunk)
                    if self._sent_file > self._size:
                        raise OSError("the stored file is larger than its recorded size")
                    return chunk
            if self._sent_file != self._size:
                raise OSError("the stored file is shorter than its recorded size")
            self._stage = 2
        if self._stage == 2:
            self._stage = 3
            return self._tail
        return b""

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all that is left: -1); b"" at the end. Copies no more than it returns."""
        out = []
        wanted = size
        while wanted != 0:
            if self._at >= len(self._piece):
                self._piece, self._at = self._next_piece(), 0
                if not self._piece:
                    break
            left = len(self._piece) - self._at
            take = left if wanted < 0 else min(wanted, left)
            out.append(self._piece[self._at:self._at + take])
            self._at += take
            if wanted > 0:
                wanted -= take
        return b"".join(out)


def _failed(kind: str, exc: Exception, started: float) -> SendResult:
    return SendResult(failure=kind, failure_detail=f"{type(exc).__name__}: {str(exc)[:300]}",
                      elapsed_ms=(time.perf_counter() - started) * 1000)


def _never_connected(exc: requests.exceptions.ConnectionError) -> bool:
    """True when the connection was never established (refused, DNS): the request cannot have been sent."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (NewConnectionError, ConnectionRefusedError)):
            return True
        reason = getattr(cause, "reason", None)
        if isinstance(reason, BaseException):
            cause = reason
            continue
        cause = cause.args[0] if cause.args and isinstance(cause.args[0], BaseException) else cause.__cause__
    return False


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from Meta, ignored rather than guessed
