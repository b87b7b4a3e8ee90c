"""The push policy for endpoints: what an attempt's answer means, when the next attempt is, and when an endpoint is
disabled. Pure: the workers (worker/_deliverer.py) apply it, tests/unit/test_delivery_policy.py checks it.

- A 2xx is a success. A 410 Gone disables the endpoint (reason 'gone'); the delivery keeps its place in the queue,
  so enabling the endpoint again resumes it. Anything else is a failure to retry: other 4xx and 5xx, a 3xx (redirects
  are never followed: a redirect could lead anywhere inside the network, endpoint_urls.py), a timeout, a refused
  or dropped connection, a URL or address the rule refuses.
- The schedule, like Svix's: the first attempt at once, then after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h (8
  attempts over about 28 h), each delay plus up to 10 % of jitter (never earlier), so deliveries that failed together
  do not all come back together. After the last attempt fails the delivery is `failed` (replayable). A `Retry-After`
  (seconds) later than the schedule's next attempt is honoured, up to RETRY_AFTER_CAP. The schedule is data
  (WA_OUTBOX_DELIVERY_SCHEDULE): tests shorten it.
- An endpoint failing continuously since `failing_since` (its first failure after its last success) for
  WA_OUTBOX_ENDPOINT_DISABLE_AFTER_DAYS (default 5) is disabled (reason 'failing').
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

# Seconds to wait after the 1st, 2nd, ... failed attempt: Svix's schedule (https://docs.svix.com/retries).
DEFAULT_SCHEDULE: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
JITTER = 0.10             # each delay is lengthened by up to this fraction, at random
RETRY_AFTER_CAP = 3600.0  # seconds: a receiver's Retry-After is honoured up to an hour
DEFAULT_DISABLE_AFTER_DAYS = 5.0


class Verdict(enum.StrEnum):
    """What one attempt's answer means."""
    DELIVERED = "delivered"
    RETRY = "retry"          # a failure: try again on the schedule (or `failed` when it ran out)
    GONE = "gone"            # 410: the receiver says the endpoint no longer exists


class DisabledReason(enum.StrEnum):
    """`endpoints.disabled_reason` the workers write (the operator's own is written by the endpoints commands)."""
    GONE = "gone"            # it answered 410
    FAILING = "failing"      # it failed continuously for WA_OUTBOX_ENDPOINT_DISABLE_AFTER_DAYS


def judge(status_code: int | None) -> Verdict:
    """The verdict on an attempt by its answer's status code (None: no answer at all: timeout, refused, ...)."""
    if status_code is not None and 200 <= status_code <= 299:
        return Verdict.DELIVERED
    if status_code == 410:
        return Verdict.GONE
    return Verdict.RETRY


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header's delay in seconds (the delta-seconds form; an HTTP date is ignored), or None."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


@dataclass(frozen=True)
class DeliveryPolicy:
    schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    disable_after_days: float = DEFAULT_DISABLE_AFTER_DAYS

    @property
    def max_attempts(self) -> int:
        return len(self.schedule) + 1

    def next_attempt_in(self, attempts: int, retry_after: float | None = None,
                        rng: random.Random | None = None) -> float | None:
        """After the `attempts`-th attempt failed: seconds until the next one, or None when the schedule ran out
        (the delivery is `failed`)."""
        if attempts >= self.max_attempts:
            return None
        scheduled = self.schedule[max(0, attempts - 1)]
        delay = scheduled * (1 + (rng or random).uniform(0, JITTER))
        if retry_after is not None:
            delay = max(delay, min(retry_after, RETRY_AFTER_CAP))
        return delay

    def failing_too_long(self, failing_since: datetime | None, now: datetime) -> bool:
        """Whether an endpoint failing since `failing_since` is to be disabled ('failing') at `now`."""
        return failing_since is not None and now - failing_since >= timedelta(days=self.disable_after_days)
