"""Meta's throughput limits, enforced on accepted sends only (a refused send does not count).

- Per business number: more than `mps` accepted messages within the last second -> 130429 (HTTP 400).
- Per (business number, recipient) pair: more than `pair_limit.messages` within `pair_limit.window_s` -> 131056.
Both are sliding windows over the arrival times of accepted sends: exact and deterministic, which is what tests of a
rate limiter need. The time is the request's arrival (read before the simulator parses or validates it, as an edge
would count), so requests handled by different threads may be admitted slightly out of arrival order: each admission
checks every window that holds the new arrival, not only the one ending at it.
Not thread-safe on its own; the simulator calls it under its state lock.
"""

from __future__ import annotations

import bisect

from .config import PairLimit


class ThroughputLimits:
    def __init__(self) -> None:
        self._by_number: dict[str, list[float]] = {}
        self._by_pair: dict[tuple[str, str], list[float]] = {}

    def admit(self, now: float, phone_number_id: str, wa_id: str, mps: float | None,
              pair_limit: PairLimit | None) -> int | None:
        """Record the send that arrived at `now` and return None, or return the error code that refuses it."""
        number_times = pair_times = None
        if mps is not None:
            number_times = _times(self._by_number, phone_number_id, now, 1.0)
            if not _fits(number_times, now, 1.0, mps):
                return 130429
        if pair_limit is not None:
            pair_times = _times(self._by_pair, (phone_number_id, wa_id), now, pair_limit.window_s)
            if not _fits(pair_times, now, pair_limit.window_s, pair_limit.messages):
                return 131056
        for times in (number_times, pair_times):
            if times is not None:
                bisect.insort(times, now)
        return None

    def clear(self) -> None:
        self._by_number.clear()
        self._by_pair.clear()


def _times(windows: dict, key, now: float, width: float) -> list[float]:
    """The sorted arrival times for `key` (those older than two widths before `now` dropped: none of them can share a
    window with an arrival this late or later, give or take the slight disorder of concurrent requests)."""
    times = windows.get(key)
    if times is None:
        times = windows[key] = []
    del times[:bisect.bisect_right(times, now - 2 * width)]
    return times


def _fits(times: list[float], now: float, width: float, limit: float) -> bool:
    """Whether every window (t - width, t] that would hold `now` holds at most `limit` arrivals with it."""
    near = times[bisect.bisect_right(times, now - width):bisect.bisect_right(times, now + width)]
    bisect.insort(near, now)
    start = 0
    for end, t in enumerate(near):  # the busiest windows end at an arrival
        while near[start] <= t - width:
            start += 1
        if t >= now and end + 1 - start > limit:
            return False
    return True


# Meta documents no error for sends over a portfolio's messaging limit
# (https://developers.facebook.com/docs/whatsapp/messaging-limits); what is reported is that such a template is
# accepted (a wamid) and later reaches a `failed` status (https://github.com/green-api/issues/issues/873: "the failed
# status may be received if ... sending limits have been reached"), the error Meta's status then carries being the
# generic 131026 "Message Undeliverable". The simulator answers so: accepted, then failed with 131026.
OVER_MESSAGING_LIMIT_CODE = 131026


class MessagingLimit:
    """The business portfolios' messaging limits: per portfolio (the numbers of its WABAs share it), unique customers
    reached with templates outside a customer-service window (no message from them to that number in the window) in
    a moving `window_s`. Not thread-safe on its own; the simulator calls it under its state lock."""

    def __init__(self) -> None:
        self._inbound: dict[tuple[str, str], float] = {}        # (number, customer) -> their last message to it
        self._counted: dict[str, dict[str, float]] = {}         # portfolio -> customer -> when they were counted
        self._over: dict[str, int] = {}                          # portfolio -> sends over its limit

    def wrote(self, now: float, phone_number_id: str, wa_id: str) -> None:
        self._inbound[(phone_number_id, wa_id)] = now

    def admit(self, now: float, phone_number_id: str, wa_id: str, is_template: bool, limit: int | None,
              window_s: float, portfolio: str = "") -> bool:
        """Count the send at `now` against `portfolio`; False when it goes over the limit (not counted then)."""
        if limit is None or not is_template:
            return True
        if now - self._inbound.get((phone_number_id, wa_id), float("-inf")) < window_s:
            return True  # a service window is open
        counted = self._counted.setdefault(portfolio, {})
        for customer in [c for c, t in counted.items() if now - t >= window_s]:
            del counted[customer]
        if wa_id in counted:
            return True
        if len(counted) >= limit:
            self._over[portfolio] = self._over.get(portfolio, 0) + 1
            return False
        counted[wa_id] = now
        return True

    def counted(self, portfolio: str | None = None) -> int:
        """Customers counted now: in `portfolio`, or in all of them (None)."""
        if portfolio is not None:
            return len(self._counted.get(portfolio, {}))
        return sum(len(c) for c in self._counted.values())

    def over_of(self, portfolio: str | None = None) -> int:
        return self._over.get(portfolio, 0) if portfolio is not None else sum(self._over.values())

    @property
    def over(self) -> int:
        return self.over_of()

    def clear(self) -> None:
        self._inbound.clear()
        self._counted.clear()
        self._over.clear()
