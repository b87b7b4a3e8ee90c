"""Wrong tokens are slowed per client, and logged as a rate.

Every wrong token sent to POST /ops/login or as /v1's bearer token spends one unit of its client's failure budget, a
token bucket of WA_OUTBOX_AUTH_FAILURE_BURST units refilled at WA_OUTBOX_AUTH_FAILURES_PER_MINUTE. A client whose
budget is spent is answered 429 with Retry-After, and its token is not even compared, so a guess costs it the wait.
Nothing waits in a request thread (that would hand the threads to whoever guesses), other clients are not affected,
and an operator who mistypes a few times never notices. A correct token costs nothing (and refunds nothing: a
guesser sharing an address with a well-configured caller gets no more guesses for it).

The client is the socket peer, or with WA_OUTBOX_TRUSTED_PROXIES = n the X-Forwarded-For entry the n-th proxy
appended. Heroku's router appends the address it saw
(https://devcenter.heroku.com/articles/http-routing#heroku-headers), so on a dyno (DYNO set) n defaults to 1:
counted per router address instead, one guesser would block everyone. IPv6 clients count per /64, the block one
host gets. The budgets live in process memory, at most MAX_CLIENTS of them (least recently failed dropped first), so
a flood of addresses cannot grow it; each gunicorn process keeps its own.

Failures are not logged one line each: one warning per SUMMARY_SECONDS that had any, "N failed logins from M
clients in the last 60 s".
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import logging
import math
import threading
import time
from collections.abc import Callable

from flask import Flask, request

from .app_state import settings_of

log = logging.getLogger(__name__)

MAX_CLIENTS = 10_000    # budgets kept (~200 bytes each); a client dropped starts again with a full budget
SUMMARY_SECONDS = 60.0  # one summary line per this many seconds with failures
_EXTENSION = "wa_outbox.auth_throttle"
_install_lock = threading.Lock()


def client_key(remote_addr: str | None, forwarded_for: str | None, trusted_proxies: int) -> str:
    """Whose budget a request spends: the address the nearest untrusted hop connected from. With n trusted
    proxies, each appending the address it saw to X-Forwarded-For, that is the n-th entry from the right (entries
    further left are whatever the client wrote). Fewer entries than proxies: the left-most, the furthest one known."""
    address = (remote_addr or "").strip()
    if trusted_proxies > 0 and forwarded_for:
        hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
        if hops:
            address = hops[-min(trusted_proxies, len(hops))]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64] or "unknown"  # not an address (a unix socket, a proxy's garbage): counted as itself
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # an IPv4 client on a dual-stack socket
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


@dataclasses.dataclass
class _Bucket:
    units: float
    at: float  # when `units` was last brought up to date


class FailureBudget:
    """The budget arithmetic, on the caller's clock (seconds, monotonic) and without locks: a token bucket of
    failures per client key."""

    def __init__(self, burst: int, per_minute: float, max_clients: int = MAX_CLIENTS) -> None:
        self.burst, self.rate, self.max_clients = float(burst), per_minute / 60.0, max_clients
        self._buckets: collections.OrderedDict[str, _Bucket] = collections.OrderedDict()

    def _units(self, key: str, now: float) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            return self.burst
        return min(self.burst, bucket.units + max(0.0, now - bucket.at) * self.rate)

    def retry_after(self, key: str, now: float) -> int | None:
        """None when `key` may try a token now; else the whole seconds until it may (at least 1)."""
        missing = 1.0 - self._units(key, now)
        if missing <= 0:
            return None
        return max(1, math.ceil(missing / self.rate))

    def failed(self, key: str, now: float) -> None:
        """`key` sent a wrong token: one unit spent."""
        units = self._units(key, now) - 1.0
        self._buckets[key] = _Bucket(units, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)


class FailureSummary:
    """Counts failures (and refusals while over budget) between two summary lines."""

    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self.failures = self.refused = 0
        self.clients: set[str] = set()
        self.more_clients = False  # more distinct clients than max_clients: "at least M"

    def _reset(self) -> None:
        self.failures = self.refused = 0
        self.clients = set()
        self.more_clients = False

    def add(self, key: str, *, refused: bool) -> bool:
        """Count one; True when it is the first since the last summary (time to schedule the next one)."""
        first = not (self.failures or self.refused)
        if refused:
            self.refused += 1
        else:
            self.failures += 1
        if key in self.clients or len(self.clients) < self.max_clients:
            self.clients.add(key)
        else:
            self.more_clients = True
        return first

    def take(self, seconds: float) -> str | None:
        """The summary line of what was counted (None when nothing was), and start counting afresh."""
        if not (self.failures or self.refused):
            return None
        clients = f"{'at least ' if self.more_clients else ''}{len(self.clients)} clients"
        line = (f"{self.failures} failed logins (wrong tokens at /ops/login or /v1) from {clients} "
                f"in the last {seconds:.0f} s")
        if self.refused:
            line += f"; {self.refused} more refused with 429 while over their budget"
        self._reset()
        return line


class AuthThrottle:
    """One app's failure budgets and summary, shared by its request threads."""

    def __init__(self, burst: int, per_minute: float, trusted_proxies: int = 0, *,
                 summary_seconds: float = SUMMARY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = FailureBudget(burst, per_minute)
        self.summary = FailureSummary()
        self.trusted_proxies, self.summary_seconds, self.clock = trusted_proxies, summary_seconds, clock
        self._lock = threading.Lock()
        self._started = clock()

    def client(self) -> str:
        """The current request's client key."""
        return client_key(request.remote_addr, request.headers.get("X-Forwarded-For"), self.trusted_proxies)

    def retry_after(self, key: str) -> int | None:
        """None: `key` may try a token; else it is refused (and counted) and should wait this many seconds."""
        if not len(self.budget):  # nobody has failed lately: no lock on /v1's hot path
            return None
        with self._lock:
            wait = self.budget.retry_after(key, self.clock())
            if wait is not None:
                self._count(key, refused=True)
            return wait

    def failed(self, key: str) -> None:
        with self._lock:
            self.budget.failed(key, self.clock())
            self._count(key, refused=False)

    def _count(self, key: str, *, refused: bool) -> None:
        if self.summary.add(key, refused=refused):
            self._started = self.clock()
            timer = threading.Timer(self.summary_seconds, self.flush)
            timer.daemon = True  # a summary still pending never holds the process up at exit
            timer.start()

    def flush(self) -> str | None:
        """Log the summary of the failures counted so far (the timer calls it SUMMARY_SECONDS after the first)."""
        with self._lock:
            line = self.summary.take(max(1.0, self.clock() - self._started))
        if line is not None:
            log.warning(line)
        return line


def of(app: Flask) -> AuthThrottle:
    """The app's throttle, made on first use from its settings."""
    throttle = app.extensions.get(_EXTENSION)
    if throttle is None:
        with _install_lock:
            throttle = app.extensions.get(_EXTENSION)
            if throttle is None:
                settings = settings_of(app)
                throttle = app.extensions[_EXTENSION] = AuthThrottle(
                    settings.auth_failure_burst, settings.auth_failures_per_minute, settings.trusted_proxies)
    return throttle
