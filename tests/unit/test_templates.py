"""The template lifecycle's pure decisions (wa_outbox/templates.py), the simulator's template book, and the dedup
key of template webhooks: no database."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATA
from wa_outbox import templates as t
from wa_outbox.simulator.templates import TemplateBook
from wa_outbox.states import HoldReason
from wa_outbox.webhooks import split_payload
from wa_outbox.worker._classify import Action, SendResult, classify


@pytest.mark.parametrize(("status", "action"), [
    ("APPROVED", t.TemplateAction.RELEASE), ("REINSTATED", t.TemplateAction.RELEASE),
    ("FLAGGED", t.TemplateAction.RELEASE), ("approved", t.TemplateAction.RELEASE),
    ("PAUSED", t.TemplateAction.HOLD_PAUSED),
    ("PENDING", t.TemplateAction.HOLD_NOT_APPROVED), ("REJECTED", t.TemplateAction.HOLD_NOT_APPROVED),
    ("IN_APPEAL", t.TemplateAction.HOLD_NOT_APPROVED), ("LIMIT_EXCEEDED", t.TemplateAction.HOLD_NOT_APPROVED),
    ("DISABLED", t.TemplateAction.DEAD),
    # a word that holds nothing lets go what was held (Meta's answer decides): a template deleted while paused
    # would otherwise hold its messages for ever
    ("DELETED", t.TemplateAction.RELEASE), ("PENDING_DELETION", t.TemplateAction.RELEASE),
    ("SOMETHING_NEW", t.TemplateAction.RELEASE), (None, None), ("", None),
])
def test_each_status_word_decides_what_its_messages_do(status, action):
    assert t.template_action(status) is action


def test_hold_reasons_are_the_schema_s_words():
    assert t.hold_reason(t.TemplateAction.HOLD_PAUSED) is HoldReason.TEMPLATE_PAUSED
    assert t.hold_reason(t.TemplateAction.HOLD_NOT_APPROVED) is HoldReason.TEMPLATE_NOT_APPROVED
    assert t.hold_reason(t.TemplateAction.RELEASE) is None and t.hold_reason(t.TemplateAction.DEAD) is None


@pytest.mark.parametrize(("status", "news", "action"), [
    ("APPROVED", True, t.TemplateAction.RELEASE),     # nothing held: releasing finds nothing, harmless
    ("PAUSED", True, t.TemplateAction.HOLD_PAUSED),   # again, too: a held message is not held twice
    ("PAUSED", False, None),                          # a quality or category change moves no message
    ("DISABLED", True, t.TemplateAction.DEAD),
    ("DELETED", True, t.TemplateAction.RELEASE),      # holds nothing: what was held goes, Meta's answer decides
    (None, False, None),
])
def test_a_batch_acts_on_the_status_it_said_something_of(status, news, action):
    assert t.status_action(status, news) is action


def test_error_codes_name_the_template_s_status():
    assert t.refusal_status(132015) == "PAUSED" and t.refusal_status(132016) == "DISABLED"
    assert t.refusal_status(132001) is None and t.refusal_status(None) is None
    assert t.template_action(t.refusal_status(132015)) is t.TemplateAction.HOLD_PAUSED
    assert t.template_action(t.refusal_status(132016)) is t.TemplateAction.DEAD


def _refusal(code: int) -> SendResult:
    return SendResult(http_status=400, body={"error": {"code": code, "message": "x"}})


def test_132015_holds_and_132016_dead_letters_at_classification():
    assert classify(_refusal(132015)).action is Action.HOLD_TEMPLATE
    assert classify(_refusal(132016)).action is Action.DEAD


def test_the_template_of_a_message():
    assert t.template_of({"type": "template", "template": {"name": "a", "language": {"code": "en_US"}}}) == \
        ("a", "en_US")
    assert t.template_of({"type": "text", "text": {"body": "x"}}) is None
    assert t.template_of({"template": {"name": "a"}}) is None
    assert t.template_of("garbage") is None


def _corpus(name: str, key: str) -> dict:
    return json.loads((DATA / "pywa" / f"{name}.json").read_text())[key]


def _change(payload: dict):
    entry = payload["entry"][0]
    change = entry["changes"][0]
    return t.webhook_change(1, change["field"], change, entry_time=entry["time"])


def test_meta_s_template_webhooks_parse_to_their_fields():
    approved = _change(_corpus("template_status_update", "approved"))
    assert (approved.name, approved.language, approved.status, approved.reason, approved.category,
            approved.template_id) == ("order_confirmation", "en_US", "APPROVED", None, "UTILITY", "1689556908129832")
    rejected = _change(_corpus("template_status_update", "rejected"))
    assert rejected.status == "REJECTED" and rejected.reason.startswith("INVALID_FORMAT (reason: Your template")
    quality = _change(_corpus("template_quality_update", "yellow"))
    assert quality.quality == "YELLOW" and quality.status is None
    category = _change(_corpus("template_category_update", "marketing"))
    assert category.category == "MARKETING" and category.category_pending is None


def test_an_announced_category_change_is_pending_with_its_time():
    change = t.webhook_change(1, "template_category_update", {"field": "template_category_update", "value": {
        "message_template_id": 1, "message_template_name": "n", "message_template_language": "en",
        "correct_category": "MARKETING", "new_category": "UTILITY", "category_update_timestamp": 1900000000}})
    assert (change.category, change.category_pending, change.category_change_at) == ("UTILITY", "MARKETING",
                                                                                      1900000000)


@pytest.mark.parametrize("value", [{}, {"message_template_name": "n"}, {"message_template_name": 5,
                                                                         "message_template_language": "en"}])
def test_a_change_naming_no_template_is_none(value):
    assert t.webhook_change(1, "message_template_status_update", {"value": value}) is None
    assert t.webhook_change(1, "messages", {"value": {"message_template_name": "n",
                                                     "message_template_language": "en"}}) is None


def test_a_sync_item_parses_with_its_quality_and_components():
    item = {"id": "77", "name": "n", "language": "pt_BR", "status": "paused", "category": "MARKETING",
            "quality_score": {"score": "RED"}, "components": [{"type": "BODY", "text": "x"}]}
    change = t.sync_change("9101", item, 1800000000)
    assert (change.waba_id, change.status, change.quality, change.components, change.ts) == (
        "9101", "PAUSED", "RED", [{"type": "BODY", "text": "x"}], 1800000000)
    assert t.sync_change("9101", {"name": "n"}, 0) is None and t.sync_change("9101", "x", 0) is None


def test_paused_approved_paused_again_are_three_stored_changes_and_a_redelivery_is_one():
    def body(event: str, at: int) -> dict:
        return {"object": "whatsapp_business_account", "entry": [{"id": "9101", "time": at, "changes": [{
            "field": "message_template_status_update", "value": {
                "event": event, "message_template_id": 1, "message_template_name": "n",
                "message_template_language": "en", "reason": "NONE"}}]}]}
    keys = [split_payload(body(e, at))[0].dedup_key for e, at in (("PAUSED", 100), ("APPROVED", 200),
                                                                   ("PAUSED", 300), ("PAUSED", 300))]
    assert len(set(keys)) == 3 and keys[2] == keys[3]


def test_the_simulator_pauses_after_n_sends_and_pages_its_listing():
    book = TemplateBook()
    _, posts = book.change({"name": "n", "language": "en"}, "9101")
    assert posts == [] and book.refusal("9101", "n", "en") is None  # registered approved: no webhook
    book.change({"name": "n", "language": "en", "status": "PAUSED", "after_sends": 2}, "9101")
    assert book.accepted("9101", "n", "en") == []
    [post] = book.accepted("9101", "n", "en")
    assert post["entry"][0]["changes"][0]["value"]["event"] == "PAUSED"
    assert book.refusal("9101", "n", "en") == 132015
    book.change({"name": "n", "language": "en", "status": "DISABLED"}, "9101")
    assert book.refusal("9101", "n", "en") == 132016
    for i in range(4):
        book.change({"name": f"m{i}", "language": "en"}, "9101")
    first, after = book.page("9101", 2, None)
    second, after2 = book.page("9101", 2, after)
    third, end = book.page("9101", 2, after2)
    assert [x["name"] for x in first + second + third] == ["n", "m0", "m1", "m2", "m3"] and end is None
    with pytest.raises(ValueError):
        book.change({"name": "n", "language": "en", "status": "NOPE"}, "9101")
    with pytest.raises(ValueError):
        book.page("9101", 2, "!!!")


def test_a_template_change_keeps_its_entry_time_for_ordering():
    body = {"object": "whatsapp_business_account", "entry": [{"id": "9101", "time": 1750000000, "changes": [{
        "field": "message_template_status_update", "value": {
            "event": "PAUSED", "message_template_name": "n", "message_template_language": "en"}}]}]}
    [event] = split_payload(body)
    assert event.payload["time"] == 1750000000 and event.payload["value"]["event"] == "PAUSED"
    change = t.webhook_change(1, event.field, event.payload, entry_time=event.payload["time"])
    assert change.ts == 1750000000
    body["entry"][0]["changes"][0]["field"] = "account_update"  # other fields: stored as before
    assert "time" not in split_payload(body)[0].payload


def test_every_hold_reason_has_its_words():
    from wa_outbox.states import HOLD_REASON_TEXT, hold_reason_text
    assert set(HOLD_REASON_TEXT) == set(HoldReason)
    assert hold_reason_text("messaging_limit").startswith("its business portfolio's 24-hour messaging limit")
    assert hold_reason_text("a_newer_word") == "a_newer_word"


def _listed(name: str, language: str = "en") -> t.TemplateChange:
    return t.TemplateChange(event_id=None, waba_id="9101", name=name, language=language, status="APPROVED")


def test_a_known_template_the_whole_listing_lacks_has_vanished():
    known = [("a", "en", "APPROVED"), ("a", "pt_BR", "PAUSED"), ("b", "en", "DELETED"), ("c", "en", None)]
    gone = t.vanished("9101", known, [_listed("a")], now=1_750_000_000)
    assert [(g.name, g.language, g.status, g.reason, g.ts) for g in gone] == [
        ("a", "pt_BR", "DELETED", t.VANISHED_REASON, 1_750_000_000),  # another language is another template
        ("c", "en", "DELETED", t.VANISHED_REASON, 1_750_000_000)]     # "b" was already recorded as deleted
    assert t.template_action(gone[0].status) is t.TemplateAction.RELEASE  # what it held goes
    assert t.vanished("9101", known, [_listed("a"), _listed("a", "pt_BR"), _listed("c")], now=1) == []
