"""The simulator's media endpoints over real HTTP (simulator/media.py): an inbound message with a file (JSON base64,
multipart, raw bytes), Meta's lookup shape, a download that needs the number's token and expires, and the media
faults. No database: the simulator alone."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest
import requests

from wa_outbox.simulator import SimulatorServer

TOKEN = "sim-media-token"
DATA = os.urandom(70_000)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def sim():
    # webhooks go nowhere (nothing listens on port 9): these tests look at the media endpoints only
    with SimulatorServer(access_token=TOKEN, app_secret="s", webhook_url="http://127.0.0.1:9/hook",
                         webhook_max_attempts=1) as server:
        yield server


def lookup(sim, media_id: str, headers=AUTH) -> requests.Response:
    return requests.get(f"{sim.base_url}/{media_id}", headers=headers, timeout=10)


def test_inbound_with_a_base64_file_then_lookup_and_download(sim):
    answer = requests.post(f"{sim.admin_url}/inbound", timeout=10, json={
        "from": "+5511912345678", "type": "document", "caption": "assinado",
        "file": {"base64": base64.b64encode(DATA).decode(), "mime_type": "application/pdf",
                 "filename": "contrato.pdf"}})
    assert answer.status_code == 200, answer.text
    sent = answer.json()
    assert sent["id"].startswith("wamid.") and sent["sha256"] == hashlib.sha256(DATA).hexdigest()
    found = lookup(sim, sent["media_id"])
    assert found.status_code == 200
    body = found.json()
    assert set(body) == {"messaging_product", "url", "mime_type", "sha256", "file_size", "id"}
    assert (body["mime_type"], body["sha256"], body["file_size"], body["id"]) == (
        "application/pdf", sent["sha256"], str(len(DATA)), sent["media_id"])
    assert requests.get(body["url"], timeout=10).status_code == 401             # the URL alone is not enough
    assert requests.get(body["url"], headers={"Authorization": "Bearer other"}, timeout=10).status_code == 401
    got = requests.get(body["url"], headers=AUTH, timeout=10)
    assert got.status_code == 200 and got.content == DATA
    assert got.headers["Content-Type"] == "application/pdf"
    assert sim.media_stats()["downloads"] == {sent["media_id"]: 1}
    assert lookup(sim, sent["media_id"], headers={}).status_code == 401
    missing = lookup(sim, "1234567890")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == 100


def test_inbound_with_multipart_and_with_raw_bytes(sim):
    multipart = requests.post(f"{sim.admin_url}/inbound", timeout=10,
                              data={"from": "+5511912345678", "type": "image"},
                              files={"file": ("foto.jpg", DATA, "image/jpeg")})
    assert multipart.status_code == 200, multipart.text
    assert lookup(sim, multipart.json()["media_id"]).json()["mime_type"] == "image/jpeg"
    raw = requests.post(f"{sim.admin_url}/inbound", timeout=10, data=DATA,
                        params={"from": "+5511912345678", "type": "audio", "mime_type": "audio/ogg", "voice": "true"},
                        headers={"Content-Type": "application/octet-stream"})
    assert raw.status_code == 200, raw.text
    assert raw.json()["sha256"] == hashlib.sha256(DATA).hexdigest()


@pytest.mark.parametrize("body, fragment", [
    ({"from": "+5511912345678", "type": "gif", "file": {"base64": "AAAA", "mime_type": "image/gif"}}, "type must"),
    ({"from": "+5511912345678", "type": "image", "file": {"base64": "***", "mime_type": "image/png"}}, "base64"),
    ({"from": "+5511912345678", "type": "image", "file": {"base64": "AAAA"}}, "mime_type"),
    ({"from": "+5511912345678", "type": "image", "file": "x"}, "file must"),
    ({"from": "", "type": "image", "file": {"base64": "AAAA", "mime_type": "image/png"}}, "phone number"),
])
def test_bad_inbound_files_are_400(sim, body, fragment):
    answer = requests.post(f"{sim.admin_url}/inbound", json=body, timeout=10)
    assert answer.status_code == 400 and fragment in answer.json()["error"]


def test_the_download_url_lives_media_url_ttl_s(sim):
    sent = sim.inbound_media("+5511912345678", "image", DATA, mime_type="image/jpeg")
    sim.configure(media_url_ttl_s=0)
    url = lookup(sim, sent["media_id"]).json()["url"]
    assert requests.get(url, headers=AUTH, timeout=10).status_code == 404
    sim.configure(media_url_ttl_s=300)
    assert requests.get(lookup(sim, sent["media_id"]).json()["url"], headers=AUTH, timeout=10).content == DATA


def test_media_faults(sim):
    sent = sim.inbound_media("+5511912345678", "image", DATA, mime_type="image/jpeg")
    sim.set_faults([{"mode": "http_error", "status": 503, "match": {"route": "media_lookup"}, "count": 1},
                    {"mode": "expired_url", "match": {"route": "media_lookup"}, "count": 1},
                    {"mode": "wrong_sha256", "match": {"route": "media_lookup"}, "count": 1},
                    {"mode": "error", "code": 131000, "match": {"route": "media_download"}, "count": 1}])
    assert lookup(sim, sent["media_id"]).status_code == 503
    expired = lookup(sim, sent["media_id"]).json()
    assert requests.get(expired["url"], headers=AUTH, timeout=10).status_code == 404
    wrong = lookup(sim, sent["media_id"]).json()
    assert wrong["sha256"] != sent["sha256"]
    good = lookup(sim, sent["media_id"]).json()
    assert good["sha256"] == sent["sha256"]
    assert requests.get(good["url"], headers=AUTH, timeout=10).status_code == 400     # the download's fault
    assert requests.get(good["url"], headers=AUTH, timeout=10).content == DATA
    # a send is not hit by media rules, nor media by send rules
    assert all(rule["remaining"] == 0 for rule in sim.faults())


@pytest.mark.parametrize("rule, fragment", [
    ({"mode": "expired_url"}, "media lookup"),
    ({"mode": "wrong_sha256", "match": {"route": "media_download"}}, "media lookup"),
    ({"mode": "lost_response", "match": {"route": "media_lookup"}}, "does not apply to route"),
    ({"mode": "latency", "ms": 1, "match": {"route": "uploads"}}, "match.route"),
    ({"mode": "failed_status", "match": {"route": "upload"}}, "does not apply to route"),
])
def test_bad_media_fault_rules_are_refused(sim, rule, fragment):
    answer = requests.put(f"{sim.admin_url}/faults", data=json.dumps([rule]), timeout=10)
    assert answer.status_code == 400 and fragment in answer.json()["error"]
