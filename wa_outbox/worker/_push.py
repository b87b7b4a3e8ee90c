"""The HTTP POST of one delivery to an endpoint, and its Standard Webhooks signature.

The URL rule (endpoint_urls.py) is enforced here, at connect time: the URL is checked again, its host is resolved,
every address it resolves to is checked (`addresses_problem`), and the connection goes to an address that was
checked, never to a second resolution of the name (DNS rebinding: a name may answer 10.0.0.5 a second later). TLS
still verifies the certificate against the host name (SNI and hostname check use the name, the socket the address).
Redirects are never followed, no proxy is used (the connection must go to the checked address), and one pool of
keep-alive connections is kept per (scheme, address, port, host name). A name's answer is kept RESOLVE_TTL seconds
(a failure is not kept): without it every delivery asked the resolver again (glibc keeps no cache), a DNS query per
delivery. The addresses are checked at every delivery all the same, and a connection goes to a checked one.

`post()` never raises: it reports what happened as a PushResult, for delivery_policy.judge.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

import urllib3
from standardwebhooks.webhooks import Webhook
from urllib3.exceptions import HTTPError

from ..delivery_policy import retry_after_seconds
from ..endpoint_urls import addresses_problem, url_problem

HEAD_BYTES = 1024          # the first bytes of an answer kept with the attempt
READ_LIMIT = 64 * 1024     # more than this and the connection is dropped rather than read to its end
MAX_POOLS = 256            # connection pools kept (one per checked address of each endpoint), the oldest closed
RESOLVE_TTL = 30.0         # seconds a name's addresses are used before it is resolved again
MAX_NAMES = 1024           # names whose addresses are kept, the least recently used dropped
USER_AGENT = "wa-outbox"

Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to now, in the resolver's order, without repeats."""
    found: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One Standard Webhooks v1 signature, `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, under a `whsec_…`
    secret, by the specification's reference library (the one its receivers verify with)."""
    return _webhook(secret).sign(msg_id, datetime.fromtimestamp(timestamp, UTC), body.decode("utf-8"))


@functools.lru_cache(maxsize=1024)
def _webhook(secret: str) -> Webhook:
    """The library's signer of `secret` (made once: it decodes the secret), kept as the worker keeps the decrypted
    secrets themselves (_deliverer.py)."""
    return Webhook(secret)


@functools.lru_cache(maxsize=4096)
def _target(url: str, allow_private: bool) -> tuple[str | None, str, str, int, str, str]:
    """What `post` needs of an endpoint's URL, worked out once per URL (it is the same for every delivery): why it is
    refused (url_problem) or None, the scheme, the host, the port, the path and query, the Host header."""
    problem = url_problem(url, allow_private=allow_private)
    if problem:
        return problem, "", "", 0, "", ""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return None, parts.scheme, parts.hostname or "", port, path, parts.netloc.rsplit("@", 1)[-1]


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The webhook-signature header: one signature per secret (during a rotation, the new and the previous one),
    space-separated: a receiver accepts the delivery when any of them verifies."""
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


@dataclass(frozen=True)
class PushResult:
    status_code: int | None = None   # None: no answer (refused URL or address, DNS, connect, timeout, dropped)
    latency_ms: float = 0.0
    head: str | None = None          # the answer's first bytes, as text
    error: str | None = None
    retry_after: float | None = None


class PushTransport:
    def __init__(self, *, timeout: float, allow_private: bool, pool_size: int = 4,
                 resolver: Resolver = resolve, ca_certs: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = urllib3.Timeout(connect=min(timeout, 10.0), read=timeout)
        self.allow_private = allow_private
        self.pool_size = pool_size
        self.resolver = resolver
        self.clock = clock
        self._resolved: OrderedDict[tuple[str, int], tuple[float, list[str]]] = OrderedDict()  # -> (until, addresses)
        self._pools: OrderedDict[tuple[str, str, int, str], urllib3.HTTPConnectionPool] = OrderedDict()
        self._lock = threading.Lock()
        self._ca_certs = (ca_certs or os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
                          or _certifi())

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> PushResult:
        started = time.perf_counter()

        def failed(error: str) -> PushResult:
            return PushResult(error=error[:500], latency_ms=(time.perf_counter() - started) * 1000)

        problem, scheme, host, port, path, host_header = _target(url, self.allow_private)
        if problem:
            return failed(f"refused: {problem}")
        try:
            addresses = self._resolve(host, port)
        except (OSError, UnicodeError) as exc:
            return failed(f"could not resolve {host}: {exc}")
        problem = addresses_problem(addresses, allow_private=self.allow_private)
        if problem:
            return failed(f"refused: {host} resolves to {problem}")
        all_headers = {**headers, "Host": host_header, "User-Agent": USER_AGENT, "Content-Type": "application/json"}
        pool = self._pool(scheme, addresses[0], port, host)
        try:
            response = pool.urlopen("POST", path, body=body, headers=all_headers, redirect=False, retries=False,
                                    preload_content=False, timeout=self.timeout, assert_same_host=False)
            complete = False
            try:
                answer = response.read(READ_LIMIT)
                complete = not response.read(1)
            finally:  # a connection read to its end is kept alive; any other is dropped
                (response.release_conn if complete else response.close)()
        except (HTTPError, OSError) as exc:
            return failed(f"{type(exc).__name__}: {exc}")
        head = answer[:HEAD_BYTES].decode("utf-8", "replace").replace("\x00", "")
        return PushResult(status_code=response.status, latency_ms=(time.perf_counter() - started) * 1000, head=head,
                          retry_after=retry_after_seconds(response.headers.get("Retry-After")))

    def _resolve(self, host: str, port: int) -> list[str]:
        """`host`'s addresses: the resolver's answer of the last RESOLVE_TTL seconds, else a new one (kept)."""
        key, now = (host, port), self.clock()
        with self._lock:
            kept = self._resolved.get(key)
            if kept is not None and kept[0] > now:
                self._resolved.move_to_end(key)
                return kept[1]
        addresses = self.resolver(host, port)  # outside the lock: a slow resolver holds up no other endpoint
        with self._lock:
            self._resolved[key] = (now + RESOLVE_TTL, addresses)
            self._resolved.move_to_end(key)
            while len(self._resolved) > MAX_NAMES:
                self._resolved.popitem(last=False)
        return addresses

    def _pool(self, scheme: str, address: str, port: int, host: str) -> urllib3.HTTPConnectionPool:
        key = (scheme, address, port, host)
        with self._lock:
            pool = self._pools.get(key)
            if pool is not None:
                self._pools.move_to_end(key)
                return pool
            if scheme == "https":
                pool = urllib3.HTTPSConnectionPool(address, port, maxsize=self.pool_size, block=False,
                                                   cert_reqs="CERT_REQUIRED", ca_certs=self._ca_certs,
                                                   server_hostname=host, assert_hostname=host, retries=False)
            else:
                pool = urllib3.HTTPConnectionPool(address, port, maxsize=self.pool_size, block=False, retries=False)
            self._pools[key] = pool
            while len(self._pools) > MAX_POOLS:
                self._pools.popitem(last=False)[1].close()
            return pool

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()


def _certifi() -> str | None:
    try:
        import certifi  # noqa: PLC0415 - requests' CA bundle, when installed (it always is beside requests)
    except ImportError:
        return None
    return certifi.where()
