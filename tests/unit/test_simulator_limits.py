"""The simulator's throughput limits (pure: no server, no database): exact sliding windows over arrival times, also
when concurrent requests are admitted slightly out of arrival order."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from wa_outbox.simulator.config import PairLimit
from wa_outbox.simulator.limits import ThroughputLimits


def busiest(times: list[float], width: float) -> int:
    """The most arrivals in any window (t - width, t], by brute force."""
    return max((sum(1 for u in times if t - width < u <= t) for t in times), default=0)


def test_the_mps_plus_first_in_any_second_is_refused_and_refusals_do_not_count():
    limits = ThroughputLimits()
    assert [limits.admit(i * 0.01, "1", "a", 3, None) for i in range(5)] == [None, None, None, 130429, 130429]
    assert limits.admit(0.995, "1", "a", 3, None) == 130429  # (-0.005, 0.995] holds all three
    assert limits.admit(1.005, "1", "a", 3, None) is None    # 0.0 has left the window: two remain


def test_a_late_admitted_earlier_arrival_counts_in_the_windows_after_it():
    limits = ThroughputLimits()
    assert limits.admit(1.5, "1", "a", 2, None) is None
    assert limits.admit(1.9, "1", "a", 2, None) is None
    # Arrived at 1.0, admitted last: (0.9, 1.9] would hold 1.0, 1.5 and 1.9.
    assert limits.admit(1.0, "1", "a", 2, None) == 130429
    assert limits.admit(0.8, "1", "a", 2, None) is None      # (0.8-1, 0.8] .. (0.8, 1.8]: at most 2 with it


def test_the_pair_limit_is_per_recipient():
    limits = ThroughputLimits()
    pair = PairLimit(messages=2, window_s=6.0)
    assert [limits.admit(t, "1", "a", None, pair) for t in (0, 1, 2)] == [None, None, 131056]
    assert limits.admit(2, "1", "b", None, pair) is None
    assert limits.admit(6.5, "1", "a", None, pair) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), max_size=60),
       st.lists(st.floats(min_value=-0.05, max_value=0.05, allow_nan=False), max_size=60),
       st.integers(min_value=1, max_value=6))
def test_accepted_arrivals_never_exceed_the_rate_in_any_sliding_second(arrivals, disorder, mps):
    """Requests handled in order of arrival give or take up to 50 ms; whatever is accepted never puts more than mps in
    any window, and an arrival is refused only when accepting it would."""
    arrivals = sorted(arrivals)
    handled = sorted(range(len(arrivals)),
                     key=lambda i: arrivals[i] + (disorder[i] if i < len(disorder) else 0.0))
    limits = ThroughputLimits()
    accepted: list[float] = []
    for i in handled:
        t = arrivals[i]
        if limits.admit(t, "1", "a", mps, None) is None:
            accepted.append(t)
        else:
            assert busiest(accepted + [t], 1.0) > mps
    assert busiest(accepted, 1.0) <= mps
