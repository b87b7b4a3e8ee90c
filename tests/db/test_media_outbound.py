"""Outbound media (issue 21): files handed over through wa_outbox.upload_media() and POST /v1/media, messages naming
them (`{"upload": id}`) refused at every enqueue entry point when the file is unknown or of another kind, and the
simulator's upload endpoint as Meta's (token, id, per-number count, an id it never gave that number refused)."""

from __future__ import annotations

import hashlib
import io
import json

import psycopg
import pytest
import requests
import sqlalchemy as sa

from tests.conftest import API_TOKEN
from wa_outbox import InvalidUpload, enqueue, enqueue_many, upload_media
from wa_outbox.db import sqlalchemy_url
from wa_outbox.outbound_media import UploadTooLarge
from wa_outbox.worker._transport import UploadBody

TO = "+5511987654321"
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 5000 + b"\n%%EOF\n"  # ~1.2 MB: more than one chunk
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def stored(db, media_id: int) -> tuple:
    return db.execute("SELECT m.direction, m.state, m.store, m.kind, m.mime_type, m.filename, m.size, "
                      "encode(m.sha256, 'hex'), (SELECT string_agg(c.data, ''::bytea ORDER BY c.seq) "
                      "FROM wa_outbox.media_chunks c WHERE c.media_id = m.id) FROM wa_outbox.media m WHERE m.id = %s",
                      (media_id,)).fetchone()


def document(upload, **extra) -> dict:
    return {"type": "document", "document": {"upload": upload, "filename": "invoice.pdf", **extra}}


# --- upload_media(): inside the caller's transaction ---------------------------------------------------------------

@pytest.mark.parametrize("form", ["bytes", "file", "iterator"])
def test_upload_media_stores_the_bytes_in_the_callers_transaction(database_url, db, form):
    data = {"bytes": PDF, "file": io.BytesIO(PDF), "iterator": iter([PDF[:1000], PDF[1000:]])}[form]
    with psycopg.connect(database_url) as conn:
        media_id = upload_media(conn, data, "application/pdf", "invoice.pdf")
        assert stored(db, media_id) is None  # not committed yet: the app's transaction decides
    assert stored(db, media_id) == ("outbound", "stored", "postgres", "document", "application/pdf", "invoice.pdf",
                                    len(PDF), hashlib.sha256(PDF).hexdigest(), PDF)


def test_upload_media_with_sqlalchemy_rolls_back_with_the_app(database_url, db):
    engine = sa.create_engine(sqlalchemy_url(database_url))
    try:
        with engine.connect() as conn:
            media_id = upload_media(conn, PDF, "application/pdf; charset=binary", "a.pdf")
            conn.rollback()
        assert stored(db, media_id) is None
        with engine.begin() as conn:
            kept = upload_media(conn, b"\x89PNG" + b"x" * 100, "image/png")
        assert stored(db, kept)[3:7] == ("image", "image/png", None, 104)
    finally:
        engine.dispose()


@pytest.mark.parametrize(("data", "mime", "error"), [
    (b"x", "application/zip", "unsupported media type 'application/zip'"),
    (b"x", "", "unsupported media type none"),
    (b"", "application/pdf", "the file is empty"),
    (b"x" * (500 * 1024 + 1), "image/webp", "larger than 512000 bytes, the cap for sticker files"),
    ("text", "text/plain", "data must be bytes"),
])
def test_upload_media_refuses_what_meta_would_and_keeps_nothing(database_url, db, data, mime, error):
    with psycopg.connect(database_url) as conn:
        with pytest.raises(InvalidUpload, match=error):
            upload_media(conn, data, mime)
        conn.execute("SELECT 1")  # the caller's transaction goes on
    assert db.execute("SELECT count(*) FROM wa_outbox.media").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM wa_outbox.media_chunks").fetchone()[0] == 0


def test_the_store_cap_refuses_a_larger_file(database_url, db, monkeypatch):
    from wa_outbox import media_store, outbound_media
    monkeypatch.setattr(outbound_media, "store", lambda: media_store.PostgresStore(max_bytes=1024 * 1024))
    with psycopg.connect(database_url) as conn, pytest.raises(UploadTooLarge, match="1048576"):
        upload_media(conn, PDF, "application/pdf")
    assert db.execute("SELECT count(*) FROM wa_outbox.media_chunks").fetchone()[0] == 0


# --- messages naming an upload --------------------------------------------------------------------------------------

def test_a_message_naming_a_stored_upload_is_queued_as_given(db, sender):
    media_id = upload_media(db, PDF, "application/pdf", "invoice.pdf")
    notification_id = enqueue(db, to=TO, message=document(media_id))
    message = db.execute("SELECT message FROM wa_outbox.notifications WHERE id = %s", (notification_id,)).fetchone()[0]
    assert message == document(media_id)  # the stored message keeps `upload`: the worker puts Meta's id in its place


UNKNOWN = "unknown upload 999999: no file with that id was handed over (POST /v1/media, upload_media())"


def entry_points(db, client, message):
    """The refusal each enqueue entry point gives `message`: Python enqueue(), enqueue_many(), SQL enqueue(),
    enqueue_many() and POST /v1/messages."""
    reasons = []
    for call in (lambda: enqueue(db, to=TO, message=message),
                 lambda: enqueue_many(db, [{"to": TO, "message": message}]),
                 lambda: db.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb)", (TO, json.dumps(message))),
                 lambda: db.execute("SELECT wa_outbox.enqueue_many(%s::jsonb)",
                                    (json.dumps([{"to": TO, "message": message}]),))):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
            call()
        reasons.append(caught.value.diag.message_primary)
    answer = client.post("/v1/messages", json={"to": TO, "message": message}, headers=AUTH)
    assert answer.status_code == 400
    reasons.append(answer.get_json()["error"]["message"])
    return reasons


def test_an_unknown_upload_is_refused_at_every_entry_point(db, client, sender):
    assert entry_points(db, client, document(999999)) == [UNKNOWN] * 5
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 0


def test_an_upload_of_another_kind_is_refused(db, client, sender):
    media_id = upload_media(db, PDF, "application/pdf")
    message = {"type": "image", "image": {"upload": media_id}}
    assert entry_points(db, client, message) == [
        f"upload {media_id}, application/pdf (document), cannot be sent in a message of type 'image'"] * 5


def test_an_inbound_media_id_is_no_upload(db, client, sender):
    db.execute("INSERT INTO wa_outbox.media (direction, meta_media_id, kind, mime_type, state) "
               "VALUES ('inbound', 'm-1', 'document', 'application/pdf', 'stored')")
    inbound_id = db.execute("SELECT id FROM wa_outbox.media").fetchone()[0]
    assert entry_points(db, client, document(inbound_id)) == [UNKNOWN.replace("999999", str(inbound_id))] * 5


# --- POST /v1/media --------------------------------------------------------------------------------------------------

def test_post_media_streams_a_file_into_the_store(client, db):
    answer = client.post("/v1/media", headers=AUTH, content_type="multipart/form-data",
                         data={"file": (io.BytesIO(PDF), "invoice.pdf", "application/pdf")})
    assert answer.status_code == 201, answer.get_json()
    body = answer.get_json()
    assert body == {"id": body["id"], "mime_type": "application/pdf", "size": len(PDF),
                    "sha256": hashlib.sha256(PDF).hexdigest(), "filename": "invoice.pdf"}
    assert stored(db, body["id"])[-1] == PDF


def test_post_media_takes_the_type_field_for_an_untyped_part(client, db):
    answer = client.post("/v1/media", headers=AUTH, content_type="multipart/form-data",
                         data={"type": "audio/ogg", "file": (io.BytesIO(b"OggS" * 10), "note.ogg",
                                                             "application/octet-stream")})
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["mime_type"] == "audio/ogg"


@pytest.mark.parametrize(("data", "content_type", "status", "error"), [
    ({"note": "x"}, "multipart/form-data", 400, "no file part"),
    ({"file": (io.BytesIO(b"PK"), "a.zip", "application/zip")}, "multipart/form-data", 400,
     "unsupported media type 'application/zip'"),
    ({"file": (io.BytesIO(b"x"), "a.bin", "application/octet-stream")}, "multipart/form-data", 400,
     "give the file's mime type"),
    ({"file": (io.BytesIO(b"x" * (5 * 1024 * 1024 + 1)), "big.png", "image/png")}, "multipart/form-data", 413,
     "larger than 5242880 bytes, the cap for image files"),
    (b"not multipart", "application/pdf", 415, "multipart/form-data"),
])
def test_post_media_refuses_bad_input_and_keeps_nothing(client, db, data, content_type, status, error):
    answer = client.post("/v1/media", headers=AUTH, content_type=content_type, data=data)
    assert answer.status_code == status
    assert error in answer.get_json()["error"]["message"]
    assert db.execute("SELECT count(*) FROM wa_outbox.media").fetchone()[0] == 0


def test_post_media_needs_a_token_and_refuses_a_body_past_the_web_limit(client, app):
    assert client.post("/v1/media", data={"file": (io.BytesIO(b"x"), "a.pdf", "application/pdf")},
                       content_type="multipart/form-data").status_code == 401
    # A document under Meta's cap (100 MB) and the store's (16 MB), over the web's body limit (6 MB here).
    limit = app.config["MAX_CONTENT_LENGTH"]
    answer = client.post("/v1/media", headers=AUTH, content_type="multipart/form-data",
                         data={"file": (io.BytesIO(b"x" * (limit + 1)), "big.pdf", "application/pdf")})
    assert answer.status_code == 413
    assert answer.get_json()["error"]["message"] == f"body is larger than the limit of {limit} bytes"


def test_a_truncated_body_is_a_400(client, db):
    body = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.pdf"\r\n'
            b"Content-Type: application/pdf\r\n\r\n%PDF-1.4 and then nothing")
    answer = client.post("/v1/media", headers=AUTH, content_type="multipart/form-data; boundary=b", data=body)
    assert answer.status_code == 400
    assert db.execute("SELECT count(*) FROM wa_outbox.media").fetchone()[0] == 0


# --- the simulator's upload endpoint --------------------------------------------------------------------------------

def sim_upload(sim, data: bytes, mime: str, *, number: str = "100000000000001", token: str = "test-access-token"):
    body = UploadBody(iter([data]), len(data), mime, "invoice.pdf")
    return requests.post(f"{sim.base_url}/{number}/media", data=body, timeout=10,
                         headers={"Authorization": f"Bearer {token}", "Content-Type": body.content_type})


def sim_send(sim, media_id: str, number: str = "100000000000001") -> requests.Response:
    return requests.post(f"{sim.base_url}/{number}/messages", timeout=10,
                         headers={"Authorization": "Bearer test-access-token"},
                         json={"messaging_product": "whatsapp", "to": TO, "type": "document",
                               "document": {"id": media_id, "filename": "invoice.pdf"}})


def test_the_simulator_uploads_as_meta_does(sim):
    refused = sim_upload(sim, PDF, "application/pdf", token="wrong")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == 190
    answer = sim_upload(sim, PDF, "application/pdf")
    assert answer.status_code == 200
    media_id = answer.json()["id"]
    assert sim.simulator.uploads.get(media_id).sha256 == hashlib.sha256(PDF).hexdigest()
    assert sim.stats()["uploads"] == {"total": 1, "by_phone_number_id": {"100000000000001": 1}}
    assert sim_send(sim, media_id).status_code == 200
    assert sim.messages(to=TO)[0]["body"]["document"]["id"] == media_id
    # An id of its own it never gave this number: refused, as Meta refuses a media id the sender cannot use.
    other = sim_send(sim, media_id, number="100000000000002")
    assert other.status_code == 400 and other.json()["error"]["code"] == 100
    assert sim_send(sim, "7700" + "0" * 12).status_code == 400
    assert sim_upload(sim, b"PK", "application/zip").json()["error"]["code"] == 131053


def test_simulator_upload_faults_hit_uploads_only(sim):
    sim.set_faults([{"mode": "http_error", "status": 503, "count": 1, "match": {"route": "upload"}}])
    assert sim_send(sim, "123456").status_code == 200  # a send is not an upload
    assert sim_upload(sim, PDF, "application/pdf").status_code == 503
    assert sim_upload(sim, PDF, "application/pdf").status_code == 200
    assert sim.stats()["uploads"]["total"] == 1


def test_post_media_keeps_memory_bounded_for_a_large_file(settings, database_url, db):
    """A 15 MB document through the real web app on a socket (the limit raised to let it in): the process's peak of
    new allocations (tracemalloc: the server thread, the client thread and the store) stays below the file's size."""
    import dataclasses
    import tracemalloc

    from tests.live import serve
    from wa_outbox.web import create_app
    size, piece = 15 * 1024 * 1024, hashlib.sha256(b"doc").digest() * 2048  # 64 KB pieces, made as they are read
    big_app = create_app(dataclasses.replace(settings, webhook_max_bytes=20 * 1024 * 1024))
    try:
        with serve(big_app) as url:
            body = UploadBody((piece for _ in range(size // len(piece))), size, "application/pdf", "big.pdf")
            tracemalloc.start()
            try:
                answer = requests.post(f"{url}/v1/media", data=body, timeout=120,
                                       headers={**AUTH, "Content-Type": body.content_type})
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
    finally:
        watch = big_app.extensions.get("wa_outbox.registry")
        if watch is not None:
            watch.stop()
    assert answer.status_code == 201, answer.text
    assert answer.json()["size"] == size
    assert db.execute("SELECT sum(octet_length(data)) FROM wa_outbox.media_chunks").fetchone()[0] == size
    print(f"peak traced allocation for a {size} B upload: {peak} B")
    # Held whole anywhere (the view, the client, a buffer), the file alone would be `size`; measured here: 4.7 to
    # 10.2 MB, a few 1 MB store chunks in flight (the rechunk buffer, the chunk, the driver's copy of it).
    assert peak < size


@pytest.mark.parametrize("body", [
    b"", b"--b", b"--b\r\n\r\n", b"--b--\r\n", b"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--\r\n",
    b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\nx\r\n--b--\r\n',
    b"".join(b'--b\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nx\r\n' % i for i in range(20)) + b"--b--\r\n",
    b'--b\r\nContent-Disposition: form-data; name="type"\r\n\r\n' + b"t" * 5000 + b"\r\n--b--\r\n",
    b"\xff\xfe" * 100,
])
@pytest.mark.parametrize("boundary", ["b", "\u00e9\u00e9"])
def test_post_media_answers_malformed_bodies_with_a_4xx(client, db, body, boundary):
    answer = client.post("/v1/media", headers={**AUTH, "Content-Type": f"multipart/form-data; boundary={boundary}"},
                         data=body)
    assert 400 <= answer.status_code < 500 and answer.get_json()["error"]["message"]
    assert db.execute("SELECT count(*) FROM wa_outbox.media").fetchone()[0] == 0
