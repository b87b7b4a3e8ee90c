"""The pure decisions of outbound media (issue 21): what Meta takes per kind, how an upload's answer is judged, the
body sent in place of `upload`, and the multipart body the worker streams (read back by the simulator's parser)."""

from __future__ import annotations

import hashlib

import pytest

from wa_outbox.messages import message_problem, upload_of
from wa_outbox.meta_schema import as_sent
from wa_outbox.outbound_media import InvalidUpload, chunks_of, filename_of, max_bytes, mime_type_of
from wa_outbox.simulator.faults import FaultSet
from wa_outbox.simulator.uploads import UploadRefused, UploadRegistry, parse_multipart
from wa_outbox.worker._classify import Action, SendResult, classify_upload
from wa_outbox.worker._transport import UploadBody
from wa_outbox.worker._uploads import UPLOAD_VALID_SECONDS, with_media_id


@pytest.mark.parametrize(("given", "mime"), [
    ("application/pdf", "application/pdf"), ("Audio/OGG; codecs=opus", "audio/ogg"), ("image/webp", "image/webp")])
def test_mime_types_meta_sends(given, mime):
    assert mime_type_of(given) == mime


@pytest.mark.parametrize("given", ["application/zip", "image/gif", "", None, 5, "application/octet-stream"])
def test_other_types_are_refused_naming_what_meta_sends(given):
    with pytest.raises(InvalidUpload, match="Meta sends application/msword, application/pdf, "):
        mime_type_of(given)


def test_the_cap_is_metas_for_the_kind_or_the_stores_if_smaller():
    mb = 1024 * 1024
    assert max_bytes("document", 16 * mb) == 16 * mb
    assert max_bytes("image", 16 * mb) == 5 * mb
    assert max_bytes("sticker", 16 * mb) == 500 * 1024


@pytest.mark.parametrize("name", ["../etc/passwd", "a\r\nb", "x" * 241, 7])
def test_filenames_are_plain_names(name):
    with pytest.raises(InvalidUpload):
        filename_of(name)


def test_chunks_of_each_form():
    assert b"".join(chunks_of(b"abc")) == b"abc"
    assert b"".join(chunks_of(iter([b"a", bytearray(b"bc")]))) == b"abc"
    with pytest.raises(InvalidUpload):
        list(chunks_of(iter(["text"])))


def test_upload_of_and_the_meta_schema_view():
    message = {"type": "document", "document": {"upload": 12, "filename": "a.pdf"}}
    assert upload_of(message) == ("document", 12)
    assert upload_of({"image": {"upload": 3}}) == ("image", 3)
    assert upload_of({"type": "text", "text": {"body": "x", "upload": 3}}) is None
    assert as_sent(message) == {"type": "document", "document": {"filename": "a.pdf", "id": "12"}}
    assert message_problem(message) is None


def test_the_meta_schema_check_judges_an_upload_as_the_id_sent():
    from wa_outbox.meta_schema import meta_problem
    assert meta_problem("5511987654321", {"type": "document", "document": {"upload": 3, "filename": "a.pdf"}}) is None
    assert "document['filename'] must be a string" in meta_problem("5511987654321", {
        "type": "document", "document": {"upload": 3, "filename": 5}})


def test_upload_answers_are_judged_like_sends_but_never_unknown():
    meta_id, decision = classify_upload(SendResult(http_status=200, body={"id": "7700123"}), 5)
    assert (meta_id, decision.action) == ("7700123", Action.SENT)
    assert classify_upload(SendResult(http_status=200, body={}), 5)[1].action is Action.RETRY
    assert classify_upload(SendResult(http_status=503), 5)[1].action is Action.RETRY
    lost = classify_upload(SendResult(failure="read_timeout", failure_detail="ReadTimeout"), 5)[1]
    assert lost.action is Action.RETRY  # nothing reached the recipient: upload again
    token = classify_upload(SendResult(http_status=401, body={"error": {"code": 190, "message": "expired"}}), 5)[1]
    assert token.action is Action.PAUSE_SENDER
    assert token.reason == "upload of file 5 failed: 190: expired"
    refused = classify_upload(SendResult(http_status=400, body={"error": {"code": 100, "message": "bad type"}}), 5)
    assert refused == (None, refused[1]) and refused[1].action is Action.DEAD


def test_the_body_sent_names_metas_id_and_keeps_the_rest():
    body = {"to": "+1", "type": "document", "document": {"upload": 9, "caption": "c"}}
    assert with_media_id(body, "document", "m-1", "inv.pdf") == {
        "to": "+1", "type": "document", "document": {"caption": "c", "id": "m-1", "filename": "inv.pdf"}}
    image = {"type": "image", "image": {"upload": 9}}
    assert with_media_id(image, "image", "m-2", "x.png") == {"type": "image", "image": {"id": "m-2"}}
    assert body["document"]["upload"] == 9  # the stored message is untouched


def test_an_upload_is_reused_for_a_little_less_than_metas_30_days():
    assert 28 * 86400 <= UPLOAD_VALID_SECONDS < 30 * 86400


def test_the_streamed_multipart_body_is_what_the_simulator_reads():
    data = hashlib.sha256(b"x").digest() * 1000
    body = UploadBody(iter([data[:100], data[100:]]), len(data), "application/pdf", 'in"voice.pdf')
    raw = b""
    while piece := body.read(1000):
        raw += piece
    assert len(raw) == len(body)
    parts = parse_multipart(body.content_type, raw)
    assert parts["messaging_product"][1] == b"whatsapp" and parts["type"][1] == b"application/pdf"
    assert parts["file"][1] == data and parts["file"][0]["filename"] == "in_voice.pdf"
    upload = UploadRegistry().accept("1", body.content_type, raw)
    assert (upload.size, upload.sha256) == (len(data), hashlib.sha256(data).hexdigest())


def test_a_stored_file_shorter_than_recorded_is_not_sent_as_if_whole():
    body = UploadBody(iter([b"abc"]), 5, "text/plain", "a.txt")
    with pytest.raises(OSError, match="shorter"):
        while body.read(2):
            pass


def test_the_simulator_refuses_uploads_meta_would():
    with pytest.raises(UploadRefused, match="multipart"):
        UploadRegistry().accept("1", "application/json", b"{}")
    body = UploadBody(iter([b"x"]), 1, "application/zip", "a.zip")
    with pytest.raises(UploadRefused) as refused:
        UploadRegistry().accept("1", body.content_type, body.read())
    assert refused.value.code == 131053


def test_fault_rules_for_uploads_never_hit_sends_and_back():
    import random
    faults = FaultSet([{"mode": "http_error", "match": {"route": "upload"}}, {"mode": "timeout"}], random.Random(1))
    assert faults.pick("1", None, None, route="upload").rule.mode == "http_error"
    assert faults.pick("1", "+1", "1").rule.mode == "timeout"
    with pytest.raises(ValueError, match="match.route"):
        FaultSet([{"mode": "timeout", "match": {"route": "media"}}], random.Random(1))
