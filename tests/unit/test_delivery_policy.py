"""The push policy, pure: verdicts, the retry schedule with jitter and Retry-After, the N-days rule."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from wa_outbox.config import ConfigError, Settings
from wa_outbox.delivery_policy import (
    DEFAULT_SCHEDULE,
    RETRY_AFTER_CAP,
    DeliveryPolicy,
    Verdict,
    judge,
    retry_after_seconds,
)


@pytest.mark.parametrize(("code", "verdict"), [
    (200, Verdict.DELIVERED), (204, Verdict.DELIVERED), (299, Verdict.DELIVERED),
    (410, Verdict.GONE),
    (301, Verdict.RETRY), (302, Verdict.RETRY), (307, Verdict.RETRY),  # redirects are failures, never followed
    (400, Verdict.RETRY), (404, Verdict.RETRY), (429, Verdict.RETRY), (500, Verdict.RETRY), (503, Verdict.RETRY),
    (100, Verdict.RETRY), (None, Verdict.RETRY),  # no answer: timeout, refused connection, refused address
])
def test_verdicts(code, verdict):
    assert judge(code) is verdict


def test_the_default_schedule_is_svixs():
    assert DEFAULT_SCHEDULE == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert DeliveryPolicy().max_attempts == 8  # at once, then seven retries


def test_each_delay_is_the_schedules_plus_jitter_never_earlier():
    policy = DeliveryPolicy()
    rng = random.Random(1)
    for attempts, scheduled in enumerate(DEFAULT_SCHEDULE, start=1):
        delays = [policy.next_attempt_in(attempts, rng=rng) for _ in range(200)]
        assert all(d is not None and scheduled <= d <= scheduled * 1.1 for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert policy.next_attempt_in(8) is None  # the last attempt failed: the delivery is failed


def test_retry_after_is_honoured_within_bounds():
    policy = DeliveryPolicy(schedule=(5.0, 300.0))
    rng = random.Random(2)
    assert policy.next_attempt_in(1, retry_after=120, rng=rng) == 120        # later than the schedule: honoured
    assert 300 <= policy.next_attempt_in(2, retry_after=1, rng=rng) <= 330    # sooner than the schedule: not
    assert policy.next_attempt_in(1, retry_after=10**9, rng=rng) == RETRY_AFTER_CAP
    assert policy.next_attempt_in(3, retry_after=1) is None                  # nor past the last attempt
    assert retry_after_seconds("120") == 120 and retry_after_seconds(" 1.5 ") == 1.5
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after_seconds("-3") is None and retry_after_seconds(None) is None
    assert retry_after_seconds("inf") is None


def test_a_short_schedule_is_data():
    policy = Settings.from_env({"WA_OUTBOX_DELIVERY_SCHEDULE": "0.1,0.2,0.3"}).delivery_policy()
    assert policy.schedule == (0.1, 0.2, 0.3) and policy.max_attempts == 4
    with pytest.raises(ConfigError, match="WA_OUTBOX_DELIVERY_SCHEDULE"):
        Settings.from_env({"WA_OUTBOX_DELIVERY_SCHEDULE": "5,soon"})


def test_failing_for_n_days_disables():
    now = datetime(2026, 1, 10, tzinfo=UTC)
    policy = Settings.from_env({"WA_OUTBOX_ENDPOINT_DISABLE_AFTER_DAYS": "5"}).delivery_policy()
    assert not policy.failing_too_long(None, now)
    assert not policy.failing_too_long(now - timedelta(days=4, hours=23), now)
    assert policy.failing_too_long(now - timedelta(days=5), now)
    assert DeliveryPolicy(disable_after_days=0.5).failing_too_long(now - timedelta(hours=13), now)


def test_the_settings_defaults():
    settings = Settings.from_env({})
    assert (settings.delivery_concurrency, settings.delivery_per_endpoint, settings.delivery_timeout) == (8, 4, 15.0)
    assert settings.endpoints_allow_private is False and settings.endpoint_disable_after_days == 5.0
    assert Settings.from_env({"WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE": "true"}).endpoints_allow_private is True
