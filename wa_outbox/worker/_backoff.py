"""Retry delays: exponential with jitter, capped. Pure."""

from __future__ import annotations

import random


def backoff_seconds(attempt: int, *, base: float = 2.0, cap: float = 900.0, rng: random.Random | None = None) -> float:
    """Delay before attempt `attempt + 1`, after `attempt` failed ones: base·2^(attempt-1), capped, with "equal
    jitter" (half fixed, half random) so workers that failed together do not retry together, yet never retry early."""
    exponential = min(cap, base * 2 ** max(0, attempt - 1))
    return exponential / 2 + (rng or random).uniform(0, exponential / 2)
