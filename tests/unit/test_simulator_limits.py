"""The simulator's throughput limits (pure: no server, no database): exact sliding windows over arrival times, also
when concurrent requests are admitted slightly out of arrival order."""

from __future__ import annotations

import json

import pytest
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


# --- the portfolio's messaging limit ---------------------------------------------------------------------------------

def test_the_messaging_limit_counts_unique_customers_outside_a_window_and_refuses_the_next():
    from wa_outbox.simulator.limits import MessagingLimit
    limit = MessagingLimit()
    day = 100.0
    assert [limit.admit(1.0, "1", c, True, 2, day) for c in ("a", "b", "a")] == [True, True, True]
    assert limit.admit(2.0, "2", "c", True, 2, day) is False      # a third customer, any number of the portfolio
    assert limit.admit(2.0, "1", "c", False, 2, day) is True      # not a template: never counts
    limit.wrote(3.0, "1", "d")
    assert limit.admit(4.0, "1", "d", True, 2, day) is True       # their window is open
    assert limit.admit(4.0, "2", "d", True, 2, day) is False      # not with the other number
    assert limit.admit(101.0, "1", "c", True, 2, day) is True     # a and b freed
    assert (limit.counted(), limit.over) == (1, 2)
    assert limit.admit(5.0, "1", "z", True, None, day) is True    # no limit


def test_the_simulator_accepts_a_send_over_the_limit_then_fails_it_and_counts_it():
    from wa_outbox.simulator.config import SimulatorConfig
    from wa_outbox.simulator.core import Simulator
    sim = Simulator(access_token="t", app_secret="s", config=SimulatorConfig().updated({"messaging_limit": 1}))
    body = {"messaging_product": "whatsapp", "to": "5511900000001", "type": "template",
            "template": {"name": "promo", "language": {"code": "en"}}}
    first = sim.handle_send("100000000000001", "Bearer t", json.dumps(body).encode())
    second = sim.handle_send("100000000000001", "Bearer t", json.dumps({**body, "to": "5511900000002"}).encode())
    assert first.status == second.status == 200
    assert [m["over_messaging_limit"] for m in sim.messages()] == [False, True]
    stats = sim.stats()
    assert stats["messaging_limit"] == {"limit": 1, "counted": 1, "over": 1, "portfolios": {}}
    assert stats["outcomes"]["over_messaging_limit"] == 1
    for bad in (-1, "x", True):
        with pytest.raises(ValueError):
            SimulatorConfig().updated({"messaging_limit": bad})


def test_each_portfolio_has_its_own_limit_over_the_numbers_of_its_wabas():
    from wa_outbox.simulator.config import SimulatorConfig
    from wa_outbox.simulator.core import Simulator
    config = SimulatorConfig().updated({
        "numbers": {"5001": {"token": "a", "waba": "901"}, "5002": {"token": "b", "waba": "902"},
                    "5003": {"token": "c", "waba": "903"}},
        "portfolios": {"71": {"wabas": ["901", "902"], "messaging_limit": 1}, "72": {"wabas": ["903"]}},
        "messaging_limit": 0})  # the default portfolio (every other number): none at all
    sim = Simulator(access_token="t", app_secret="s", config=config)
    sends = [("5001", "a", "5511900000001"), ("5002", "b", "5511900000002"),  # 71's second customer: over
             ("5002", "b", "5511900000001"),                                  # 71's counted customer: goes
             ("5003", "c", "5511900000003"), ("5003", "c", "5511900000004")]  # 72: unlimited
    for number, token, to in sends:
        body = {"messaging_product": "whatsapp", "to": to, "type": "template",
                "template": {"name": "promo", "language": {"code": "en"}}}
        assert sim.handle_send(number, f"Bearer {token}", json.dumps(body).encode()).status == 200
    assert [m["over_messaging_limit"] for m in sim.messages()] == [False, True, False, False, False]
    assert sim.stats()["messaging_limit"] == {
        "limit": 0, "counted": 1, "over": 1,
        "portfolios": {"71": {"limit": 1, "counted": 1, "over": 1}, "72": {"limit": None, "counted": 0, "over": 0}}}
    assert config.portfolio_of("100000000000001") == ("", 0)  # the simulator's own number: the default portfolio
    removed = config.updated({"portfolios": {"71": None}})
    assert removed.portfolio_of("5001") == ("", 0) and set(removed.portfolios) == {"72"}


@pytest.mark.parametrize("bad", [
    {"71": {"wabas": "901"}}, {"71": {"wabas": ["x"]}}, {"71": {"wabas": [], "limit": 1}},
    {"71": {"wabas": ["901"], "messaging_limit": -1}}, {"71": {"wabas": ["901"]}, "72": {"wabas": ["901"]}},
    {"x": {"wabas": []}}, [],
])
def test_bad_portfolios_are_refused(bad):
    from wa_outbox.simulator.config import SimulatorConfig
    with pytest.raises(ValueError):
        SimulatorConfig().updated({"portfolios": bad})
