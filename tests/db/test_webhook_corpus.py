"""Every webhook payload of Meta's OpenAPI spec (16) and pywa's test data (74) is accepted and stored with the
right keys, and a second delivery stores nothing new."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.conftest import load_corpus, post_webhook

CORPUS = load_corpus()


TIMED_FIELDS = ("message_template_status_update", "message_template_quality_update", "template_category_update")


def expected_keys(payload: dict) -> set[str]:
    """The dedup keys, computed independently of the receiver's code from the payload's documented shape."""
    keys = set()
    for entry in payload["entry"]:
        for change in entry["changes"]:
            field, value = change["field"], change["value"]
            lists = [k for k in ("messages", "message_echoes", "statuses")
                     if field in ("messages", "smb_message_echoes") and k in value]
            for name in lists:
                for item in value[name]:
                    if name == "statuses":
                        key = f"s:{item['id']}:{item['status']}"
                        if item.get("recipient_participant_id"):
                            key += f":{item['recipient_participant_id']}"
                        keys.add(key)
                    else:
                        keys.add(f"m:{item['id']}")
            rest = {k: v for k, v in value.items() if k not in lists}
            if not lists or any(isinstance(v, list) and k != "contacts" for k, v in rest.items()):
                digested = [entry.get("id"), field, rest]
                if field in TIMED_FIELDS and "time" in entry:  # a template's state: the same value may come again
                    digested.append(str(entry["time"]))
                canonical = json.dumps(digested, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                keys.add("d:" + hashlib.sha256(canonical.encode()).hexdigest())
    return keys


def test_corpus_is_complete():
    assert sum(name.startswith("openapi:") for name in CORPUS) == 16
    assert sum(name.startswith("pywa:") for name in CORPUS) == 74


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_payload_is_stored_once_with_its_keys(name, client, db):
    payload = CORPUS[name]
    keys = expected_keys(payload)
    r = post_webhook(client, payload)
    assert r.status_code == 200, r.get_data(as_text=True)
    assert r.json["new"] == len(keys)
    rows = db.execute("SELECT dedup_key, field, status, payload FROM wa_outbox.webhook_events").fetchall()
    assert {k for k, *_ in rows} == keys
    assert all(status == "queued" for _, _, status, _ in rows)
    fields = {c["field"] for e in payload["entry"] for c in e["changes"]}
    assert {f for _, f, _, _ in rows} == fields
    for _, field, _, stored in rows:
        assert stored["field"] == field and isinstance(stored["value"], dict)
    again = post_webhook(client, payload)
    assert again.status_code == 200 and again.json["new"] == 0
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0] == len(keys)


def test_the_whole_corpus_in_one_post_stores_each_update_once(client, db):
    """Merged into one batch, the corpus stores exactly the union of its keys (examples share wamids)."""
    merged = {"object": "whatsapp_business_account",
              "entry": [e for p in CORPUS.values() for e in p["entry"]]}
    keys = set().union(*(expected_keys(p) for p in CORPUS.values()))
    r = post_webhook(client, merged)
    assert r.status_code == 200
    assert r.json["new"] == len(keys)
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0] == len(keys)
