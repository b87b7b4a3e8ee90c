"""The retry policy: how long to wait after a failed attempt, and when to stop and dead-letter. Pure.

One owner for every path that retries: outbound sends (`worker/_outcomes.py`), inbound webhook events
(`worker/_inbound.py`), and the rescuers and reconciler, whose set-based SQL receives `max_attempts` from here.
`WA_OUTBOX_MAX_ATTEMPTS`, `WA_OUTBOX_RETRY_BASE_SECONDS` and `WA_OUTBOX_RETRY_MAX_SECONDS` configure it; a row's own
`max_attempts`, when set, overrides the policy's for that row.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


def backoff_seconds(attempt: int, *, base: float = 2.0, cap: float = 900.0, rng: random.Random | None = None) -> float:
    """Delay before attempt `attempt + 1`, after `attempt` failed ones: base·2^(attempt-1), capped, with "equal
    jitter" (half fixed, half random) so workers that failed together do not retry together, yet never retry early."""
    exponential = min(cap, base * 2 ** min(max(0, attempt - 1), 64))
    return exponential / 2 + (rng or random).uniform(0, exponential / 2)


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 2.0
    max_seconds: float = 900.0
    max_attempts: int = 10

    def limit(self, row_max_attempts: int | None = None) -> int:
        """The attempts a row gets: its own `max_attempts` when set, else the policy's."""
        return row_max_attempts or self.max_attempts

    def exhausted(self, attempts: int, row_max_attempts: int | None = None) -> bool:
        return attempts >= self.limit(row_max_attempts)

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after `attempts` failed attempts."""
        return backoff_seconds(attempts, base=self.base_seconds, cap=self.max_seconds, rng=rng)

    def after_failure(self, attempts: int, row_max_attempts: int | None = None,
                      rng: random.Random | None = None) -> float | None:
        """After the `attempts`-th failed attempt: the delay before the next one, or None when the row is dead."""
        if self.exhausted(attempts, row_max_attempts):
            return None
        return self.delay(attempts, rng)
