"""Wrong tokens are slowed per client and logged as a rate (web/auth_throttle.py): the budget arithmetic on a given
clock, the client's address, the summary line, the settings; no database (the app itself: test_auth_throttle_app.py)."""

from __future__ import annotations

import logging
import threading

import pytest

from wa_outbox.config import ConfigError, Settings
from wa_outbox.web.auth_throttle import AuthThrottle, FailureBudget, FailureSummary, client_key


def test_a_client_gets_its_burst_then_one_try_per_refill():
    budget = FailureBudget(burst=3, per_minute=6)  # one unit per 10 s
    for _ in range(3):
        assert budget.retry_after("a", now=100.0) is None
        budget.failed("a", now=100.0)
    assert budget.retry_after("a", now=100.0) == 10
    assert budget.retry_after("a", now=104.5) == 6  # whole seconds, rounded up
    assert budget.retry_after("a", now=110.0) is None
    budget.failed("a", now=110.0)
    assert budget.retry_after("a", now=110.0) == 10
    assert budget.retry_after("b", now=110.0) is None  # another client is not affected


def test_a_budget_refills_to_its_burst_and_no_further():
    budget = FailureBudget(burst=2, per_minute=60)
    budget.failed("a", now=0.0)
    for now in (1000.0, 1000.0):
        assert budget.retry_after("a", now=now) is None
        budget.failed("a", now=now)
    assert budget.retry_after("a", now=1000.0) == 1


def test_a_few_typos_never_block():
    budget = FailureBudget(burst=10, per_minute=6)
    for _ in range(9):
        budget.failed("operator", now=0.0)
    assert budget.retry_after("operator", now=0.0) is None


def test_a_flood_of_addresses_cannot_grow_the_budgets_without_limit():
    budget = FailureBudget(burst=3, per_minute=6, max_clients=100)
    for i in range(10_000):
        budget.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", now=float(i))
    assert len(budget) == 100
    assert budget.retry_after("10.0.39.15", now=10_000.0) is None  # the oldest were dropped ...
    budget.failed("10.0.39.15", now=10_000.0)
    assert len(budget) == 100  # ... and the newest kept


@pytest.mark.parametrize("remote, forwarded, proxies, expected", [
    ("192.0.2.7", None, 0, "192.0.2.7"),
    ("192.0.2.7", "198.51.100.1", 0, "192.0.2.7"),  # no proxy trusted: the header is the client's word
    ("10.1.2.3", "6.6.6.6, 198.51.100.1", 1, "198.51.100.1"),  # Heroku: the router appended the last one
    ("10.1.2.3", "6.6.6.6, 198.51.100.1, 10.9.9.9", 2, "198.51.100.1"),
    ("10.1.2.3", "198.51.100.1", 3, "198.51.100.1"),  # fewer entries than proxies: the furthest one known
    ("10.1.2.3", "", 1, "10.1.2.3"),
    ("2001:db8:1:2:3:4:5:6", None, 0, "2001:db8:1:2::/64"),  # one host's IPv6 block is one client
    ("::ffff:192.0.2.7", None, 0, "192.0.2.7"),
    ("10.1.2.3", "not-an-address", 1, "not-an-address"),
    (None, None, 0, "unknown"),
])
def test_client_key(remote, forwarded, proxies, expected):
    assert client_key(remote, forwarded, proxies) == expected


def test_the_summary_counts_failures_and_clients_once_per_interval():
    summary = FailureSummary(max_clients=2)
    assert summary.take(60) is None
    assert summary.add("a", refused=False) is True  # the first: the caller schedules the line
    for key in ("a", "b", "c"):
        assert summary.add(key, refused=False) is False
    summary.add("a", refused=True)
    line = summary.take(60)
    assert line == ("4 failed logins (wrong tokens at /ops/login or /v1) from at least 2 clients in the last 60 s; "
                    "1 more refused with 429 while over their budget")
    assert summary.take(60) is None


def test_the_summary_line_is_logged_by_itself_after_the_interval(caplog):
    """No request needs to come after the guesses for their summary to be written."""
    arrived = threading.Event()

    class Signal(logging.Handler):
        def emit(self, record):
            if "failed logins" in record.getMessage():
                arrived.set()

    handler = Signal()
    logging.getLogger("wa_outbox.web.auth_throttle").addHandler(handler)
    try:
        throttle = AuthThrottle(burst=5, per_minute=6, summary_seconds=0.01)
        for _ in range(3):
            throttle.failed("192.0.2.1")
        assert arrived.wait(timeout=30)
    finally:
        logging.getLogger("wa_outbox.web.auth_throttle").removeHandler(handler)
    assert throttle.flush() is None  # already taken


def test_the_settings_parse_and_refuse():
    settings = Settings.from_env({"WA_OUTBOX_TRUSTED_PROXIES": "1", "WA_OUTBOX_AUTH_FAILURE_BURST": "20",
                                  "WA_OUTBOX_AUTH_FAILURES_PER_MINUTE": "2.5"})
    assert (settings.trusted_proxies, settings.auth_failure_burst, settings.auth_failures_per_minute) == (1, 20, 2.5)
    defaults = Settings.from_env({})
    assert (defaults.trusted_proxies, defaults.auth_failure_burst, defaults.auth_failures_per_minute) == (0, 10, 6.0)
    assert Settings.from_env({"DYNO": "web.1"}).trusted_proxies == 1  # Heroku's router in front
    assert Settings.from_env({"DYNO": "web.1", "WA_OUTBOX_TRUSTED_PROXIES": "0"}).trusted_proxies == 0
    for name, value in (("WA_OUTBOX_TRUSTED_PROXIES", "-1"), ("WA_OUTBOX_AUTH_FAILURE_BURST", "0"),
                        ("WA_OUTBOX_AUTH_FAILURES_PER_MINUTE", "nan")):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: value})
