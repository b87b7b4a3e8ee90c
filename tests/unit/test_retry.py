"""The retry policy, pure: one owner for outbound sends, inbound events and the rescuers."""

from __future__ import annotations

import random

from wa_outbox.config import Settings
from wa_outbox.retry import RetryPolicy


def test_delays_grow_and_are_capped_and_jittered():
    policy = RetryPolicy(base_seconds=2, max_seconds=60, max_attempts=20)
    rng = random.Random(3)
    assert 1 <= policy.delay(1, rng) <= 2 and 8 <= policy.delay(4, rng) <= 16
    assert all(30 <= policy.delay(a, rng) <= 60 for a in range(7, 20))
    assert 30 <= policy.delay(10_000, rng) <= 60  # no overflow for absurd attempt counts


def test_after_failure_is_a_delay_until_the_attempts_run_out():
    policy = RetryPolicy(base_seconds=1, max_seconds=10, max_attempts=3)
    assert policy.after_failure(1) is not None and policy.after_failure(2) is not None
    assert policy.after_failure(3) is None
    assert policy.after_failure(3, row_max_attempts=5) is not None  # a row's own limit overrides the policy's
    assert policy.after_failure(2, row_max_attempts=2) is None


def test_the_setting_configures_the_policy():
    policy = Settings.from_env({"WA_OUTBOX_MAX_ATTEMPTS": "4", "WA_OUTBOX_RETRY_BASE_SECONDS": "3",
                                "WA_OUTBOX_RETRY_MAX_SECONDS": "30"}).retry_policy()
    assert policy == RetryPolicy(base_seconds=3, max_seconds=30, max_attempts=4)
    assert Settings.from_env({}).retry_policy().max_attempts == 10
