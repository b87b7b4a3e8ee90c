"""The simulator's request schema: Meta's OpenAPI `Message`, extracted into one JSON file, and the checker on top.

No server here: these tests pin what the simulator accepts and how it words a refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from wa_outbox.simulator.validation import SCHEMA_PATH, InvalidRequest, RequestChecker

EXAMPLES = json.loads((Path(__file__).parents[1] / "data" / "openapi" / "message-examples.json").read_text())
READ_RECEIPT = "Send typing indicator and read receipt"
TEXT = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": "+5511999990000", "type": "text",
        "text": {"body": "Olá"}}


@pytest.fixture(scope="module")
def checker() -> RequestChecker:
    return RequestChecker()


def test_schema_file_is_self_contained_and_valid_json_schema():
    raw = SCHEMA_PATH.read_text()
    assert "#/components/" not in raw  # every spec reference was rewritten to #/$defs/
    document = json.loads(raw)
    Draft202012Validator.check_schema(document)
    assert (SCHEMA_PATH.parent / "LICENSE").read_text().startswith("MIT License")
    assert "facebook/openapi" in (SCHEMA_PATH.parent / "SOURCE").read_text()


def test_there_are_fifty_examples():
    assert len(EXAMPLES) == 50


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_spec_example_validates_against_the_whole_schema(name):
    """The document's own root (Message, a oneOf of every kind) accepts each example, without our dispatcher."""
    validator = Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    errors = [e.message for e in validator.iter_errors(EXAMPLES[name])]
    assert errors == []


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_checker_classifies_every_spec_example(checker, name):
    body = dict(EXAMPLES[name])
    if "to" in body:
        body["to"] = "+16505551234"  # most examples leave a placeholder that is no phone number
    parsed = checker.parse(body)
    if name == READ_RECEIPT:
        assert (parsed.kind, parsed.to) == ("mark_read", None)
    else:
        assert parsed.kind == "message"
        assert parsed.wa_id == "16505551234"
        assert parsed.type == body.get("type", parsed.type)


def _without(body: dict, key: str) -> dict:
    return {k: v for k, v in body.items() if k != key}


@pytest.mark.parametrize("body, details", [
    (_without(TEXT, "to"), "The parameter to is required."),
    ({**TEXT, "type": "telegram"}, "Param type must be one of {audio, contacts, document, image, interactive, "
                                   "location, reaction, sticker, template, text, video}."),
    ({**TEXT, "text": {}}, "The parameter text['body'] is required."),
    ({**TEXT, "text": {"body": 42}}, "Param text['body'] must be a string."),
    ({**TEXT, "to": 5511999990000}, "Param to must be a string."),
    ({**TEXT, "text": {"body": "x" * 4097}}, "Param text['body'] must be at most 4096 characters long."),
    ({**TEXT, "colour": "red"}, "Unknown parameter(s): colour."),
    ({**TEXT, "text": {"body": "hi", "bold": True}}, "Unknown parameter(s): text['bold']."),
    ({**TEXT, "recipient_type": "everyone"}, "Param recipient_type must be one of {individual, group}."),
    ({**TEXT, "biz_opaque_callback_data": "x" * 513},
     "Param biz_opaque_callback_data must be at most 512 characters long."),
    (_without(TEXT, "messaging_product"), "The parameter messaging_product is required."),
    ({**_without(TEXT, "text"), "type": "image", "image": {}},
     "Param image must match exactly one allowed form (with id; or link)."),
    ({**_without(TEXT, "text"), "type": "template", "template": {"name": "hello_world", "language": {}}},
     "The parameter template['language']['code'] is required."),
    ({**TEXT, "to": "{{Recipient-Phone-Number}}"},
     "Param to must be a phone number in E.164 format, got '{{Recipient-Phone-Number}}'."),
    ({"messaging_product": "whatsapp", "status": "read"}, "The parameter message_id is required."),
    (["not", "an", "object"], "The request body must be a JSON object."),
])
def test_broken_bodies_are_refused_naming_the_field(checker, body, details):
    with pytest.raises(InvalidRequest) as refused:
        checker.parse(body)
    assert str(refused.value) == details


def test_type_defaults_to_text_as_meta_does(checker):
    parsed = checker.parse(_without(TEXT, "type"))
    assert parsed.type == "text"
    with pytest.raises(InvalidRequest, match=r"text\['body'\]"):
        checker.parse({**_without(TEXT, "type"), "text": {}})


def test_biz_opaque_callback_data_is_part_of_a_send(checker):
    assert checker.parse({**TEXT, "biz_opaque_callback_data": "outbox-42"}).biz_opaque_callback_data == "outbox-42"


def test_without_validation_only_the_simulators_own_needs_are_checked(checker):
    parsed = checker.parse({**TEXT, "text": {"body": 42}, "colour": "red"}, validate=False)
    assert (parsed.kind, parsed.wa_id) == ("message", "5511999990000")
    with pytest.raises(InvalidRequest, match="The parameter to is required"):
        checker.parse(_without(TEXT, "to"), validate=False)
    with pytest.raises(InvalidRequest, match="Param type must be one of"):
        checker.parse({**TEXT, "type": "telegram"}, validate=False)
