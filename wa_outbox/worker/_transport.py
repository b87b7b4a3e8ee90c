"""The Cloud API call: one pooled `requests.Session`, connection-level retries only where nothing was sent.

`send()` never raises for network trouble: it reports what happened as a SendResult, for `classify()` to judge.
Whether a failed request may have reached Meta is the distinction that matters: a refused or timed-out *connect*
sent nothing (safe to retry, and urllib3 retries it at once); a *read* timeout or a dropped connection happened
after the body went out (ambiguous: never retried blindly).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Protocol

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import NewConnectionError
from urllib3.util.retry import Retry

from ._classify import SendResult


class Transport(Protocol):
    def send(self, phone_number_id: str, body: dict[str, Any], token: str | None = None) -> SendResult: ...

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
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size, max_retries=retry)
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

    def send(self, phone_number_id: str, body: dict[str, Any], token: str | None = None) -> SendResult:
        started = time.perf_counter()
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
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
                          retry_after=_retry_after(response.headers.get("Retry-After")), elapsed_ms=elapsed_ms)

    def close(self) -> None:
        self.session.close()


class DryRunTransport:
    """Accepts everything without a network call: the queue machinery alone (staging, benchmarks)."""

    def send(self, phone_number_id: str, body: dict[str, Any], token: str | None = None) -> SendResult:
        wamid = f"wamid.dryrun.{body.get('biz_opaque_callback_data')}"
        return SendResult(http_status=200, body={"messages": [{"id": wamid}]})

    def close(self) -> None:
        pass


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
