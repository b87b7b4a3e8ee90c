"""Error classification, backoff and outcome mapping: pure, no database."""

from __future__ import annotations

import dataclasses
import random

import pytest

from wa_outbox.retry import RetryPolicy, backoff_seconds
from wa_outbox.worker._classify import Action, SendResult, classify, may_be_the_token
from wa_outbox.worker._outcomes import Claimed, outcome, request_body


def graph_error(code: int, status: int = 400, retry_after: float | None = None) -> SendResult:
    return SendResult(http_status=status, retry_after=retry_after, body={"error": {
        "message": f"(#{code}) something", "type": "OAuthException", "code": code,
        "error_data": {"messaging_product": "whatsapp", "details": "details here"}, "fbtrace_id": "Abc"}})


def test_accepted_with_wamid_is_sent():
    d = classify(SendResult(http_status=200, body={"messages": [{"id": "wamid.X"}]}))
    assert (d.action, d.wamid) == (Action.SENT, "wamid.X")


def test_200_without_a_message_id_is_unknown_not_sent_or_retried():
    assert classify(SendResult(http_status=200, body={"weird": True})).action is Action.UNKNOWN
    assert classify(SendResult(http_status=200, body=None, failure="bad_response")).action is Action.UNKNOWN


@pytest.mark.parametrize("code, action", [
    (131000, Action.RETRY), (131016, Action.RETRY), (2, Action.RETRY), (1, Action.RETRY), (133004, Action.RETRY),
    (131057, Action.THROTTLE_SENDER), (131049, Action.RETRY_AT), (131048, Action.RETRY_AT),
    (130429, Action.THROTTLE_SENDER), (80007, Action.THROTTLE_SENDER), (4, Action.THROTTLE_SENDER),
    (131056, Action.PAIR_LIMIT),
    (0, Action.PAUSE_SENDER), (190, Action.PAUSE_SENDER), (368, Action.PAUSE_SENDER), (131031, Action.PAUSE_SENDER),
    (131042, Action.PAUSE_SENDER),
    (10, Action.PAUSE_SENDER), (200, Action.PAUSE_SENDER), (299, Action.PAUSE_SENDER),  # the token's permission
    (3, Action.DEAD), (131005, Action.DEAD),
    (131050, Action.DEAD), (131026, Action.DEAD), (131047, Action.DEAD), (131051, Action.DEAD), (100, Action.DEAD),
    (131008, Action.DEAD), (131009, Action.DEAD), (131021, Action.DEAD), (132000, Action.DEAD),
    (132016, Action.DEAD), (133010, Action.DEAD), (132015, Action.HOLD_TEMPLATE),  # a paused template: held
])
def test_graph_error_codes_follow_the_table(code, action):
    d = classify(graph_error(code))
    assert d.action is action
    assert d.code == code and "details here" in d.reason


def test_code_decides_not_http_status():
    assert classify(graph_error(130429, status=400)).action is Action.THROTTLE_SENDER
    assert classify(graph_error(131026, status=500)).action is Action.DEAD


def test_alerts_for_senders_that_need_a_human():
    assert classify(graph_error(190, status=401)).alert
    assert classify(graph_error(133010)).alert
    assert not classify(graph_error(131026)).alert


def test_retry_after_is_honoured():
    assert classify(graph_error(130429, retry_after=7)).wait_seconds == 7
    d = classify(graph_error(131000, retry_after=30))
    assert (d.action, d.wait_seconds) == (Action.RETRY_AT, 30)
    assert classify(SendResult(http_status=503, retry_after=12)).wait_seconds == 12


@pytest.mark.parametrize("status, action", [(500, Action.RETRY), (502, Action.RETRY), (503, Action.RETRY),
                                            (429, Action.THROTTLE_SENDER), (404, Action.DEAD), (400, Action.DEAD)])
def test_without_a_graph_error_the_http_status_decides(status, action):
    assert classify(SendResult(http_status=status, body=None)).action is action


def test_connect_failures_retry_but_read_failures_are_unknown():
    assert classify(SendResult(failure="connect", failure_detail="refused")).action is Action.RETRY
    assert classify(SendResult(failure="read_timeout", failure_detail="t")).action is Action.UNKNOWN
    assert classify(SendResult(failure="connection_lost", failure_detail="reset")).action is Action.UNKNOWN


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    rng = random.Random(1)
    delays = [backoff_seconds(a, base=2, cap=60, rng=rng) for a in range(1, 10)]
    assert 1 <= delays[0] <= 2 and 2 <= delays[1] <= 4 and 4 <= delays[2] <= 8
    assert all(30 <= d <= 60 for d in delays[5:])
    assert len({round(backoff_seconds(3, rng=rng), 6) for _ in range(20)}) > 1  # jittered


ROW = Claimed(id=42, phone_number_id="1", recipient="5511987654321", message={"type": "text", "text": {"body": "x"}},
              attempts=3, max_attempts=5, correlation_id="c")


def test_request_body_adds_recipient_and_callback_data():
    assert request_body(ROW) == {"messaging_product": "whatsapp", "recipient_type": "individual",
                                 "to": "+5511987654321", "type": "text", "text": {"body": "x"},
                                 "biz_opaque_callback_data": "42"}


def test_outcomes():
    fixed = RetryPolicy(base_seconds=16, max_seconds=16, max_attempts=10)  # jitter: 8 to 16 s
    retry = outcome(ROW, classify(graph_error(131000)), fixed, 1.0)
    assert (retry["status"], retry["event"], retry["refund"]) == ("queued", "retry_scheduled", False)
    assert 8 <= retry["delay"] <= 16
    last = dataclasses.replace(ROW, attempts=5)
    exhausted = outcome(last, classify(graph_error(131000)), fixed, 1.0)
    assert exhausted["status"] == "dead" and "attempts exhausted" in exhausted["detail"]["reason"]
    throttled = outcome(last, classify(graph_error(130429)), fixed, 1.0)
    assert (throttled["status"], throttled["refund"]) == ("queued", True)  # no attempt burnt, even the last
    dead = outcome(ROW, classify(graph_error(131026)), fixed, 1.0)
    assert dead["status"] == "dead" and dead["error"]["code"] == 131026
    sent = outcome(ROW, classify(SendResult(http_status=200, body={"messages": [{"id": "wamid.Y"}]})), fixed, 1.0)
    assert (sent["status"], sent["wamid"]) == ("sent", "wamid.Y")


def test_a_token_without_access_to_the_number_pauses_the_sender():
    """100/33 on a send: the token cannot see this phone number (another number's token): the sender, not the
    message, is at fault."""
    body = {"error": {"message": "Unsupported post request. Object with ID '5001' does not exist, cannot be loaded "
                                 "due to missing permissions, or does not support this operation.",
                      "type": "GraphMethodException", "code": 100, "error_subcode": 33}}
    decided = classify(SendResult(http_status=400, body=body))
    assert decided.action is Action.PAUSE_SENDER and decided.alert
    assert classify(graph_error(100)).action is Action.DEAD  # any other 100: the message's parameters


@pytest.mark.parametrize("code, token", [(190, True), (0, True), (10, True), (200, True), (368, False),
                                         (131031, False), (131042, False), (131000, False), (131026, False)])
def test_which_refusals_may_be_the_token(code, token):
    result = graph_error(code)
    assert may_be_the_token(result, classify(result)) is token
