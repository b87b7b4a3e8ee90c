"""Issue 21's inbound media through the real web (on a socket), a real worker and the simulator: the customer's file
reaches the app byte-identical (sha256), in Postgres and in an S3-compatible bucket (moto's server mode, a real HTTP
server started here); an expired URL is fetched again; three 503s then success give one media.ready; a redelivered
webhook fetches once; 404 is final; retries end expired; a refused token pauses the sender; the size cap (declared or
counted) records too_large; GET /v1/media answers ranges and states; prune removes a bucket's objects."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import socket
import subprocess
import sys
import threading

import pytest
import requests

from tests.conftest import API_TOKEN
from tests.live import SENDER, running_worker, serve, wait_for, worker_settings
from wa_outbox import db as wa_db, media_policy, queries
from wa_outbox.media_retention import prune_media
from wa_outbox.simulator import SimulatorServer

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
CUSTOMER = "+5511912345678"
JPEG = b"\xff\xd8\xff\xe0" + os.urandom(200_000) + b"\xff\xd9"


@pytest.fixture
def stack(app, settings, database_url):
    """The web on a socket, the simulator posting to it, and a function that starts a worker against both."""
    with serve(app) as web_url, SimulatorServer(access_token=settings.access_token, app_secret=settings.app_secret,
                                                webhook_url=f"{web_url}/webhooks/whatsapp",
                                                phone_number_id=SENDER) as sim:
        def worker(**overrides):
            return running_worker(worker_settings(settings, sim.base_url, **overrides))
        yield web_url, sim, worker


def media_row(db, media_id: str) -> dict | None:
    row = db.execute("SELECT id, state, size, encode(sha256, 'hex'), attempts, mime_type, store, last_error "
                     "FROM wa_outbox.media WHERE meta_media_id = %s", (media_id,)).fetchone()
    if row is None:
        return None
    return dict(zip(("id", "state", "size", "sha256", "attempts", "mime_type", "store", "last_error"), row,
                    strict=True))


def ready_events(db, media_id: str) -> list[dict]:
    return [r[0] for r in db.execute("SELECT data FROM wa_outbox.events WHERE type = 'media.ready' "
                                     "AND data ->> 'media_id' = %s", (media_id,)).fetchall()]


def stored(db, media_id: str, timeout: float = 60.0) -> dict:
    return wait_for(lambda: (row := media_row(db, media_id)) and row["state"] == "stored" and row, timeout,
                    what=f"media {media_id} stored")


def download_sha256(url: str) -> tuple[str, int, requests.Response]:
    digest, size = hashlib.sha256(), 0
    with requests.get(url, headers=AUTH, stream=True, timeout=30) as response:
        assert response.status_code == 200, response.text[:300]
        for chunk in response.iter_content(256 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size, response


def ten_mb_document() -> list[bytes]:
    seed = os.urandom(1024 * 1024)
    return [hashlib.sha256(bytes([i])).digest() + seed[32:] for i in range(10)]


# --- Postgres -------------------------------------------------------------------------------------------------------

def test_an_image_and_a_10_mb_document_reach_the_app_byte_identical(stack, db):
    web_url, sim, worker = stack
    document = ten_mb_document()
    with worker():
        image = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg", caption="quebrou")
        pdf = sim.inbound_media(CUSTOMER, "document", iter(document), mime_type="application/pdf",
                               filename="contrato assinado.pdf")
        for sent in (image, pdf):
            stored(db, sent["media_id"])
    for sent, size in ((image, len(JPEG)), (pdf, 10 * 1024 * 1024)):
        row = media_row(db, sent["media_id"])
        assert (row["sha256"], row["size"], row["store"]) == (sent["sha256"], size, "postgres")
        # by Meta's id, and by wa-outbox's own: the same bytes, streamed through the real web
        for given in (sent["media_id"], str(row["id"])):
            digest, got, response = download_sha256(f"{web_url}/v1/media/{given}")
            assert (digest, got) == (sent["sha256"], size)
            assert int(response.headers["Content-Length"]) == size
        [event] = ready_events(db, sent["media_id"])
        assert event["id"] == row["id"] and event["sha256"] == sent["sha256"] and event["size"] == size
        assert event["wamid"] == sent["id"] and event["phone_number_id"] == SENDER
        assert event["wa_id"] == CUSTOMER.lstrip("+")
    assert response.headers["Content-Type"] == "application/pdf"
    assert "contrato" in response.headers["Content-Disposition"]
    # each file was looked up and downloaded once
    stats = sim.media_stats()
    assert stats["downloads"] == {image["media_id"]: 1, pdf["media_id"]: 1}


def test_ranges_and_states_of_get_v1_media(stack, db, client):
    web_url, sim, worker = stack
    with worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        stored(db, sent["media_id"])
    url = f"/v1/media/{sent['media_id']}"
    part = client.get(url, headers={**AUTH, "Range": "bytes=100-1999999"})  # across the first chunk's end
    assert part.status_code == 206 and part.data == JPEG[100:]
    assert part.headers["Content-Range"] == f"bytes 100-{len(JPEG) - 1}/{len(JPEG)}"
    tail = client.get(url, headers={**AUTH, "Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.data == JPEG[-10:]
    refused = client.get(url, headers={**AUTH, "Range": f"bytes={len(JPEG)}-"})
    assert refused.status_code == 416 and refused.headers["Content-Range"] == f"bytes */{len(JPEG)}"
    assert client.get(url).status_code == 401
    missing = client.get("/v1/media/999999999999", headers=AUTH)
    assert missing.status_code == 404 and "state" not in missing.get_json()
    # a media whose lookup keeps failing: 404 with its state, pending
    sim.set_faults([{"mode": "http_error", "status": 503, "match": {"route": "media_lookup"}}])
    with worker():
        later = sim.inbound_media(CUSTOMER, "audio", b"OggS voice", mime_type="audio/ogg", voice=True)
        wait_for(lambda: (r := media_row(db, later["media_id"])) and r["attempts"] >= 1, what="a failed lookup")
    pending = client.get(f"/v1/media/{later['media_id']}", headers=AUTH)
    assert pending.status_code == 404 and pending.get_json()["state"] == "pending"


def test_a_url_that_expires_before_the_download_is_fetched_again(stack, db):
    web_url, sim, worker = stack
    sim.set_faults([{"mode": "expired_url", "match": {"route": "media_lookup"}, "count": 1}])
    with worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        row = stored(db, sent["media_id"])
    assert row["sha256"] == sent["sha256"] and row["attempts"] == 1  # looked up again within the same attempt
    assert sim.media_stats()["lookups"][sent["media_id"]] == 2
    assert len(ready_events(db, sent["media_id"])) == 1


def test_three_503s_on_the_lookup_then_success_give_one_media_ready(stack, db):
    web_url, sim, worker = stack
    sim.set_faults([{"mode": "http_error", "status": 503, "match": {"route": "media_lookup"}, "count": 3}])
    with worker():
        sent = sim.inbound_media(CUSTOMER, "document", b"%PDF-1.7 fatura", mime_type="application/pdf",
                                 filename="fatura.pdf")
        row = stored(db, sent["media_id"])
        assert row["attempts"] == 4
        assert [r["remaining"] for r in sim.faults()] == [0]
    assert len(ready_events(db, sent["media_id"])) == 1


def test_a_wrong_sha256_is_fetched_again_and_a_slow_download_still_arrives(stack, db):
    web_url, sim, worker = stack
    # the first download answers 500, the second lookup declares another sha256: the third attempt stores it
    sim.set_faults([{"mode": "wrong_sha256", "match": {"route": "media_lookup"}, "count": 2},
                    {"mode": "latency", "ms": 300, "match": {"route": "media_download"}},
                    {"mode": "http_error", "status": 500, "match": {"route": "media_download"}, "count": 1}])
    with worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        row = stored(db, sent["media_id"])
    assert row["sha256"] == sent["sha256"] and row["attempts"] == 3
    assert len(ready_events(db, sent["media_id"])) == 1


def test_attempts_spent_on_503s_do_not_count_towards_giving_up_on_wrong_bytes(stack, db):
    """The chaos run's file: its attempts went on 503s (an outage, a dead worker's lease spend them the same way),
    then one lookup declared another sha256. Only downloads whose bytes were wrong count towards `failed`."""
    web_url, sim, worker = stack
    over = media_policy.MAX_CORRUPT_ATTEMPTS
    sim.set_faults([{"mode": "http_error", "status": 503, "match": {"route": "media_lookup"}, "count": over},
                    {"mode": "wrong_sha256", "match": {"route": "media_lookup"}, "count": 1}])
    with worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        row = stored(db, sent["media_id"])
        assert [r["remaining"] for r in sim.faults()] == [0, 0]  # every 503 and the wrong sha256 were answered
    # Stored, though its attempts went past MAX_CORRUPT_ATTEMPTS (a late wake-up or a lost lease may add more):
    # the one wrong download is all that counted (none, had its outcome been lost with a lease).
    assert row["sha256"] == sent["sha256"] and row["attempts"] > media_policy.MAX_CORRUPT_ATTEMPTS
    assert db.execute("SELECT corrupt_fetches FROM wa_outbox.media WHERE id = %s", (row["id"],)).fetchone()[0] <= 1
    assert len(ready_events(db, sent["media_id"])) == 1


def test_bytes_that_never_match_give_up_as_failed(stack, db):
    web_url, sim, worker = stack
    sim.set_faults([{"mode": "wrong_sha256", "match": {"route": "media_lookup"}}])  # every lookup
    with worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        row = wait_for(lambda: (r := media_row(db, sent["media_id"])) and r["state"] == "failed" and r,
                       what="media failed")
    assert row["attempts"] >= media_policy.MAX_CORRUPT_ATTEMPTS  # a lost lease's attempt counts, not as corrupt
    assert "sha256" in row["last_error"]["error"]
    assert db.execute("SELECT corrupt_fetches FROM wa_outbox.media WHERE id = %s",
                      (row["id"],)).fetchone()[0] == media_policy.MAX_CORRUPT_ATTEMPTS
    assert not ready_events(db, sent["media_id"])


def test_a_redelivered_webhook_fetches_once(stack, db):
    web_url, sim, worker = stack
    sim.configure(duplicate_rate=1.0, duplicate_max=2)  # every webhook POST delivered again, byte for byte
    with worker():
        sent = sim.inbound_media(CUSTOMER, "video", b"\x00\x00\x00\x18ftypmp42" + os.urandom(5000),
                                 mime_type="video/mp4")
        stored(db, sent["media_id"])
        assert sim.wait_for_webhooks_idle(20)
        # the redeliveries were received (and refused as duplicates) after the first was stored
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE status <> 'done'")
                 .fetchone()[0] == 0, what="every webhook event processed")
    assert db.execute("SELECT count(*) FROM wa_outbox.media").fetchone()[0] == 1
    assert sim.media_stats()["lookups"] == {sent["media_id"]: 1}
    assert sim.media_stats()["downloads"] == {sent["media_id"]: 1}
    assert len(ready_events(db, sent["media_id"])) == 1


def test_a_404_is_final_and_the_message_itself_is_not_held_back(stack, db):
    web_url, sim, worker = stack
    sent = sim.inbound_media(CUSTOMER, "sticker", b"RIFF....WEBP", mime_type="image/webp")
    sim.simulator.media._files.pop(sent["media_id"])  # Meta no longer knows the id
    with worker():
        row = wait_for(lambda: (r := media_row(db, sent["media_id"])) and r["state"] == "failed" and r,
                       what="media failed")
    assert "100" in row["last_error"]["error"] and row["attempts"] == 1
    assert not ready_events(db, sent["media_id"])
    answer = requests.get(f"{web_url}/v1/media/{sent['media_id']}", headers=AUTH, timeout=10)
    assert answer.status_code == 404 and answer.json()["state"] == "failed"
    # the message was received and processed as any other
    assert db.execute("SELECT count(*) FROM wa_outbox.events WHERE type = 'message.received'").fetchone()[0] == 1
    assert db.execute("SELECT status FROM wa_outbox.webhook_events").fetchone()[0] == "done"


def test_retried_while_the_id_can_be_fetched_then_expired(stack, db):
    web_url, sim, worker = stack
    sim.set_faults([{"mode": "http_error", "status": 503, "match": {"route": "media_lookup"}}])  # every lookup
    with worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        wait_for(lambda: (r := media_row(db, sent["media_id"])) and r["attempts"] >= 1, what="a failed lookup")
        # Meta serves the id two more seconds: the backoff (0.2 s to 1 s here) retries until the next try is past it
        db.execute("UPDATE wa_outbox.media SET fetch_until = now() + interval '2 seconds' WHERE meta_media_id = %s",
                   (sent["media_id"],))
        row = wait_for(lambda: (r := media_row(db, sent["media_id"])) and r["state"] == "expired" and r,
                       what="media expired")
    assert row["attempts"] >= 2 and "503" in row["last_error"]["error"]
    assert sim.media_stats()["downloads"] == {} and not ready_events(db, sent["media_id"])
    answer = requests.get(f"{web_url}/v1/media/{sent['media_id']}", headers=AUTH, timeout=10)
    assert answer.status_code == 404 and answer.json()["state"] == "expired"


def test_a_refused_token_pauses_the_sender_not_the_media_queue(stack, db, settings):
    web_url, sim, worker = stack
    other = "100000000000002"
    sim.configure(numbers={other: {"token": "other-number-token"}})
    with worker():
        refused = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg", phone_number_id=other)
        row = wait_for(lambda: (r := media_row(db, refused["media_id"])) and r["last_error"] and r,
                       what="the refused fetch recorded")
        # the other number's own token is not the worker's (WHATSAPP_ACCESS_TOKEN): 401, its sender is paused
        paused = db.execute("SELECT paused_until > now(), pause_reason FROM wa_outbox.rate_limits "
                            "WHERE phone_number_id = %s", (other,)).fetchone()
        assert paused[0] and "media fetch" in paused[1]
        assert row["state"] == "pending" and row["attempts"] == 0  # refunded: it waits for the token
        # another sender's media goes on
        fine = sim.inbound_media(CUSTOMER, "image", JPEG[:1000], mime_type="image/jpeg")
        stored(db, fine["media_id"])
    assert media_row(db, refused["media_id"])["state"] == "pending"
    for text in (str(row["last_error"]), paused[1]):
        assert "other-number-token" not in text and settings.access_token not in text


def test_over_the_size_cap_is_recorded_too_large(stack, db, client):
    web_url, sim, worker = stack
    with worker(media_max_bytes=1000):
        sent = sim.inbound_media(CUSTOMER, "document", b"x" * 5000, mime_type="application/pdf")
        wait_for(lambda: (r := media_row(db, sent["media_id"])) and r["state"] == "too_large", what="too_large")
    assert sim.media_stats()["downloads"] == {}  # the lookup's file_size said so: nothing downloaded
    answer = client.get(f"/v1/media/{sent['media_id']}", headers=AUTH)
    assert answer.status_code == 404 and answer.get_json()["state"] == "too_large"
    assert db.execute("SELECT count(*) FROM wa_outbox.media_chunks").fetchone()[0] == 0


def test_over_the_size_cap_counted_while_downloading_is_recorded_too_large(stack, db, monkeypatch):
    """A lookup that does not say the file's size: the cap is enforced on the bytes as they arrive."""
    web_url, sim, worker = stack
    judge = media_policy.judge_lookup

    def without_file_size(status, body, max_bytes=None):
        if isinstance(body, dict):
            body = {k: v for k, v in body.items() if k != "file_size"}
        return judge(status, body, max_bytes)
    monkeypatch.setattr(media_policy, "judge_lookup", without_file_size)
    with worker(media_max_bytes=1000):
        sent = sim.inbound_media(CUSTOMER, "document", os.urandom(5000), mime_type="application/pdf")
        row = wait_for(lambda: (r := media_row(db, sent["media_id"])) and r["state"] == "too_large" and r,
                       what="too_large")
    assert row["attempts"] == 1 and "1000" in row["last_error"]["error"]
    assert db.execute("SELECT count(*) FROM wa_outbox.media_chunks").fetchone()[0] == 0
    assert not ready_events(db, sent["media_id"])
    answer = requests.get(f"{web_url}/v1/media/{sent['media_id']}", headers=AUTH, timeout=10)
    assert answer.status_code == 404 and answer.json()["state"] == "too_large"


def test_no_download_url_is_stored_or_logged(stack, db, caplog):
    web_url, sim, worker = stack
    sim.set_faults([{"mode": "expired_url", "match": {"route": "media_lookup"}, "count": 3}])
    with caplog.at_level("DEBUG"), worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        wait_for(lambda: (r := media_row(db, sent["media_id"])) and r["attempts"] >= 2, what="a retried fetch")
    dump = " ".join(str(v) for row in db.execute("SELECT * FROM wa_outbox.media").fetchall() for v in row)
    ours = " ".join(r.getMessage() + str(r.__dict__) for r in caplog.records if r.name.startswith("wa_outbox"))
    assert "media" in ours
    for text in (dump, ours):
        assert "/_media/" not in text


# --- S3 (moto's server mode) ----------------------------------------------------------------------------------------

def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server, a real HTTP server in its own process, and a bucket in it."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        def up() -> bool:
            try:
                return requests.get(endpoint, timeout=10).status_code < 500
            except requests.RequestException:
                return False
        wait_for(up, 60, 0.2, "moto's server")
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        boto3.client("s3").create_bucket(Bucket="wa-media")
        yield endpoint
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def s3_app(settings, s3_server):
    from wa_outbox.web import create_app
    s3_settings = dataclasses.replace(settings, media_store="s3://wa-media/inbound")
    app = create_app(s3_settings)
    yield app, s3_settings
    watch = app.extensions.get("wa_outbox.registry")
    if watch is not None:
        watch.stop()
    app.extensions["wa_outbox.engine"].dispose()


def test_an_image_and_a_10_mb_document_byte_identical_in_a_bucket(s3_app, s3_server, db):
    app, s3_settings = s3_app
    document = ten_mb_document()
    with serve(app) as web_url, SimulatorServer(access_token=s3_settings.access_token,
                                                app_secret=s3_settings.app_secret,
                                                webhook_url=f"{web_url}/webhooks/whatsapp",
                                                phone_number_id=SENDER) as sim, \
            running_worker(worker_settings(s3_settings, sim.base_url)):
        image = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        pdf = sim.inbound_media(CUSTOMER, "document", iter(document), mime_type="application/pdf",
                               filename="nota.pdf")
        for sent in (image, pdf):
            stored(db, sent["media_id"])
        for sent, size in ((image, len(JPEG)), (pdf, 10 * 1024 * 1024)):
            row = media_row(db, sent["media_id"])
            assert (row["store"], row["sha256"], row["size"]) == ("s3", sent["sha256"], size)
            key = db.execute("SELECT store_key FROM wa_outbox.media WHERE id = %s", (row["id"],)).fetchone()[0]
            assert key == f"inbound/{row['id']}"
            assert db.execute("SELECT count(*) FROM wa_outbox.media_chunks").fetchone()[0] == 0
            # GET /v1/media redirects to a presigned URL of the object: its bytes are the customer's
            redirect = requests.get(f"{web_url}/v1/media/{sent['media_id']}", headers=AUTH, allow_redirects=False,
                                    timeout=10)
            assert redirect.status_code == 302
            location = redirect.headers["Location"]
            assert location.startswith(s3_server)  # the bucket's own URL, not the web's
            with requests.get(location, stream=True, timeout=30) as obj:
                assert obj.status_code == 200
                digest = hashlib.sha256()
                for chunk in obj.iter_content(256 * 1024):
                    digest.update(chunk)
            assert digest.hexdigest() == sent["sha256"]
            assert obj.headers["Content-Type"] == ("image/jpeg" if sent is image else "application/pdf")
            assert len(ready_events(db, sent["media_id"])) == 1


def test_a_dead_workers_fetch_is_rescued(stack, db):
    web_url, sim, worker = stack
    with worker():
        sent = sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg")
        stored(db, sent["media_id"])
    # as if a worker had died mid-fetch: its lease ran out, nothing was stored, no event written
    db.execute("UPDATE wa_outbox.media SET state = 'fetching', locked_by = 'a dead worker', "
               "locked_until = now() - interval '1 second', stored_at = NULL WHERE meta_media_id = %s",
               (sent["media_id"],))
    db.execute("DELETE FROM wa_outbox.events WHERE type = 'media.ready'")
    with worker() as running:
        running.maintain()
        row = stored(db, sent["media_id"])
    assert row["sha256"] == sent["sha256"] and len(ready_events(db, sent["media_id"])) == 1
    assert sim.media_stats()["downloads"] == {sent["media_id"]: 2}


def test_a_slow_download_into_a_bucket_keeps_its_lease(s3_app, db, database_url):
    """In Postgres the chunks' transaction holds the row (their foreign key); into a bucket only the lease does: it is
    renewed while the bytes flow, so another worker's rescuer never takes a download that is still going."""
    app, s3_settings = s3_app
    engine = wa_db.create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    stop, rescued = threading.Event(), []

    def rescuer() -> None:  # another worker's maintenance, as often as it can
        while not stop.wait(0.1):
            rescued.extend(queries.rescue_media(engine, limit=100))
    thread = threading.Thread(target=rescuer, daemon=True)
    try:
        with serve(app) as web_url, SimulatorServer(access_token=s3_settings.access_token,
                                                    app_secret=s3_settings.app_secret, phone_number_id=SENDER,
                                                    webhook_url=f"{web_url}/webhooks/whatsapp") as sim, \
                running_worker(worker_settings(s3_settings, sim.base_url, lease_seconds=1.5)):
            # 4 MB at a second a megabyte, with leases of 1.5 s
            sim.set_faults([{"mode": "slow_body", "ms": 1000, "match": {"route": "media_download"}, "count": 1}])
            thread.start()
            slow = sim.inbound_media(CUSTOMER, "document", os.urandom(4 * 1024 * 1024),
                                     mime_type="application/pdf")
            row = stored(db, slow["media_id"])
            assert sim.faults()[0]["remaining"] == 0
    finally:
        stop.set()
        thread.join()
        engine.dispose()
    assert rescued == [] and row["attempts"] == 1 and row["sha256"] == slow["sha256"]
    assert len(ready_events(db, slow["media_id"])) == 1


def test_prune_removes_a_buckets_object_with_its_row(s3_app, s3_server, db, database_url):
    import boto3
    from botocore.exceptions import ClientError
    app, s3_settings = s3_app
    with serve(app) as web_url, SimulatorServer(access_token=s3_settings.access_token,
                                                app_secret=s3_settings.app_secret,
                                                webhook_url=f"{web_url}/webhooks/whatsapp",
                                                phone_number_id=SENDER) as sim, \
            running_worker(worker_settings(s3_settings, sim.base_url)):
        old, new = (sim.inbound_media(CUSTOMER, "image", JPEG, mime_type="image/jpeg") for _ in range(2))
        rows = [stored(db, sent["media_id"]) for sent in (old, new)]
    keys = [f"inbound/{row['id']}" for row in rows]
    bucket = boto3.client("s3")
    db.execute("UPDATE wa_outbox.media SET created_at = now() - interval '40 days' WHERE id = %s", (rows[0]["id"],))
    engine = wa_db.create_engine(database_url, pool_size=1)
    try:
        assert prune_media(engine, s3_settings, days=30) == 1
    finally:
        engine.dispose()
    assert [r[0] for r in db.execute("SELECT id FROM wa_outbox.media").fetchall()] == [rows[1]["id"]]
    with pytest.raises(ClientError) as gone:
        bucket.head_object(Bucket="wa-media", Key=keys[0])
    assert gone.value.response["Error"]["Code"] == "404"
    assert bucket.head_object(Bucket="wa-media", Key=keys[1])["ContentLength"] == len(JPEG)
