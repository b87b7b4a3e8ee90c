"""Meta's throughput limits, enforced on accepted sends only (a refused send does not count).

- Per business number: more than `mps` accepted messages within the last second -> 130429 (HTTP 400).
- Per (business number, recipient) pair: more than `pair_limit.messages` within `pair_limit.window_s` -> 131056.
Both are sliding windows of acceptance times: exact and deterministic, which is what tests of a rate limiter need.
Not thread-safe on its own; the simulator calls it under its state lock.
"""

from __future__ import annotations

from collections import deque

from .config import PairLimit


class ThroughputLimits:
    def __init__(self) -> None:
        self._by_number: dict[str, deque[float]] = {}
        self._by_pair: dict[tuple[str, str], deque[float]] = {}

    def admit(self, now: float, phone_number_id: str, wa_id: str, mps: float | None,
              pair_limit: PairLimit | None) -> int | None:
        """Record the send at `now` and return None, or return the error code that refuses it."""
        number_window = pair_window = None
        if mps is not None:
            number_window = _window(self._by_number, phone_number_id, now - 1.0)
            if len(number_window) >= mps:
                return 130429
        if pair_limit is not None:
            pair_window = _window(self._by_pair, (phone_number_id, wa_id), now - pair_limit.window_s)
            if len(pair_window) >= pair_limit.messages:
                return 131056
        for window in (number_window, pair_window):
            if window is not None:
                window.append(now)
        return None

    def clear(self) -> None:
        self._by_number.clear()
        self._by_pair.clear()


def _window(windows: dict, key, horizon: float) -> deque[float]:
    """The acceptance times for `key` after `horizon` (older ones are dropped)."""
    window = windows.get(key)
    if window is None:
        window = windows[key] = deque()
    while window and window[0] <= horizon:
        window.popleft()
    return window
