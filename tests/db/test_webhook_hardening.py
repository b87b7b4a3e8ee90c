"""Poison webhooks through the real app on real Postgres: every signed JSON POST is acknowledged and stored (its
bytes recoverable), and no POST can fail another — however they are coalesced into one INSERT."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
import threading

import psycopg
import pytest
import requests
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from tests.conftest import APP_SECRET, load_corpus, meta_body, post_webhook
from tests.db.test_webhook_receiver import envelope, status, text_message
from tests.live import serve, wait_for
from wa_outbox.webhook_store import WebhookStore
from wa_outbox.webhooks import events_of_body, sign

PLACEHOLDER = "@@POISON@@"


def with_poison(fragment: bytes, wamid: str = "wamid.POISON") -> bytes:
    """A signed-as-Meta body of one text message whose `text.body` is the raw JSON `fragment`."""
    body = meta_body(envelope(messages=[text_message(wamid, body=PLACEHOLDER)]))
    return body.replace(json.dumps(PLACEHOLDER).encode(), fragment)


def rows(db) -> list[dict]:
    with db.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute("SELECT e.dedup_key, e.kind, e.field, e.status, e.last_error, e.payload, b.body "
                           "FROM wa_outbox.webhook_events e "
                           "LEFT JOIN wa_outbox.webhook_bodies b ON b.sha256 = e.raw_body_sha256 ORDER BY e.id"
                           ).fetchall()


def count(db) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.webhook_events").fetchone()[0]


# (raw JSON of the message text, what the stored text.body becomes)
POISONS = {
    "nul": (b'"a\\u0000b"', "a\ufffdb"),
    "lone high surrogate": (b'"a\\ud800b"', "a\ufffdb"),
    "lone low surrogate": (b'"\\udc00"', "\ufffd"),
    "surrogates reversed": (b'"\\ude00\\ud83d"', "\ufffd\ufffd"),
    "raw CESU-8 surrogate": (b'"a\xed\xa0\x80b"', "a\ufffdb"),
    "NaN": (b"NaN", "NaN"),
    "Infinity": (b"Infinity", "Infinity"),
    "-Infinity": (b"-Infinity", "-Infinity"),
    "float beyond range": (b"1e400", "1e400"),
    "5,000-digit integer": (b"9" * 5000, "9" * 5000),
    "5,000-digit float": (b"1" * 5000 + b".5", "1" * 5000 + ".5"),
}


@pytest.mark.parametrize("name", list(POISONS))
def test_poison_is_acknowledged_stored_sanitized_and_its_bytes_kept(name, client, db):
    fragment, stored_text = POISONS[name]
    body = with_poison(fragment)
    r = post_webhook(client, body)
    assert r.status_code == 200, r.get_data()
    assert r.json == {"received": 1, "new": 1, "duplicate": 0}
    [row] = rows(db)
    assert (row["dedup_key"], row["status"]) == ("m:wamid.POISON", "queued")
    assert row["payload"]["value"]["messages"][0]["text"]["body"] == stored_text
    assert bytes(row["body"]) == body  # the original bytes, byte for byte
    assert post_webhook(client, body).json == {"received": 1, "new": 0, "duplicate": 1}
    assert count(db) == 1


def test_poison_in_keys_and_ids_is_sanitized_with_stable_keys(client, db):
    body = meta_body(envelope(messages=[text_message("wamid.\x00X")]))
    body = body.replace(b'"messaging_product"', b'"\\ud800"')  # a key that jsonb cannot hold
    assert post_webhook(client, body).json["new"] == 1
    [row] = rows(db)
    assert row["dedup_key"] == "m:wamid.\ufffdX"
    assert "\ufffd" in row["payload"]["value"]
    assert bytes(row["body"]) == body
    assert post_webhook(client, body).json["new"] == 0


def test_only_the_sanitized_events_of_a_post_refer_to_its_bytes(client, db):
    payload = envelope(messages=[text_message("wamid.CLEAN"), text_message("wamid.DIRTY", body=PLACEHOLDER)],
                       statuses=[status("wamid.S", "read")])
    body = meta_body(payload).replace(json.dumps(PLACEHOLDER).encode(), b'"\\u0000"')
    assert post_webhook(client, body).json["new"] == 3
    kept = {r["dedup_key"]: r["body"] is not None for r in rows(db)}
    assert kept == {"m:wamid.CLEAN": False, "m:wamid.DIRTY": True, "s:wamid.S:read": False}


def test_a_clean_post_stores_no_bytes(client, db):
    assert post_webhook(client, envelope(messages=[text_message("wamid.E", body="Olá 😀")])).json["new"] == 1
    assert db.execute("SELECT raw_body_sha256 FROM wa_outbox.webhook_events").fetchone()[0] is None


def deep(levels: int) -> bytes:
    return b"[" * levels + b"1" + b"]" * levels


@pytest.mark.parametrize("levels", [10_000, 100_000])
def test_json_too_deep_to_parse_is_stored_dead_with_its_bytes(levels, client, db):
    body = with_poison(deep(levels))
    r = post_webhook(client, body)
    assert r.status_code == 200, r.get_data()
    [row] = rows(db)
    assert row["dedup_key"] == "d:" + hashlib.sha256(body).hexdigest()
    assert (row["kind"], row["status"]) == ("change", "dead")
    assert row["last_error"].startswith("cannot be processed: ")
    assert bytes(row["body"]) == body
    health = db.execute("SELECT rows FROM wa_outbox.queue_health WHERE queue = 'webhook_events' "
                        "AND status = 'dead'").fetchone()
    assert health == (1,)
    assert post_webhook(client, body).json == {"received": 1, "new": 0, "duplicate": 1}
    assert count(db) == 1


def test_deep_bodies_that_are_not_json_or_not_an_object_are_still_400(client, db):
    r = post_webhook(client, with_poison(b"[" * 10_000))  # never closed: not JSON
    assert r.status_code == 400 and "not valid JSON" in r.json["error"]["message"]
    r = post_webhook(client, deep(10_000))
    assert r.status_code == 400 and "JSON object" in r.json["error"]["message"]
    assert count(db) == 0


def test_raw_control_characters_and_invalid_utf8_are_not_json(client, db):
    for body in (with_poison(b'"a\x00b"'), with_poison(b'"a\xffb"')):
        r = post_webhook(client, body)
        assert r.status_code == 400 and "not valid JSON" in r.json["error"]["message"]
    assert count(db) == 0


def test_an_absurdly_long_wamid_is_stored_under_a_digest_key(client, db):
    payload = envelope(messages=[text_message("wamid." + "x" * 5000)])
    assert post_webhook(client, payload).json["new"] == 1  # the unique index cannot hold a 5,000-character key
    [row] = rows(db)
    assert row["dedup_key"].startswith("d:") and row["kind"] == "change"
    assert post_webhook(client, payload).json["new"] == 0


def test_bodies_go_with_the_last_event_that_refers_to_them(client, db):
    body = with_poison(b'"\\u0000"')
    post_webhook(client, body)
    digest = hashlib.sha256(body).digest()
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_bodies WHERE sha256 = %s", (digest,)).fetchone() == (1,)
    db.execute("DELETE FROM wa_outbox.webhook_events")
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_bodies WHERE sha256 = %s", (digest,)).fetchone() == (0,)


# --- no POST fails another --------------------------------------------------------------------------------------------

def post_concurrently(url: str, bodies: list[bytes], threads: int = 16) -> list[requests.Response]:
    """Post every body through a real socket from `threads` threads at once; the answers in body order."""
    answers: list[requests.Response | None] = [None] * len(bodies)
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def work(k: int) -> None:
        try:
            with requests.Session() as session:
                barrier.wait()
                for i in range(k, len(bodies), threads):
                    answers[i] = session.post(f"{url}/webhooks/whatsapp", data=bodies[i], timeout=60, headers={
                        "Content-Type": "application/json", "X-Hub-Signature-256": sign(APP_SECRET, bodies[i])})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors
    return answers  # type: ignore[return-value]


def test_poison_posts_among_many_valid_ones_fail_none_of_them(app, db):
    poisons = [fragment for fragment, _ in POISONS.values()] + [deep(10_000)]
    bodies, valid = [], []
    for i in range(240):
        if i % 8 == 0:
            bodies.append(with_poison(poisons[(i // 8) % len(poisons)], wamid=f"wamid.P{i}"))
        else:
            bodies.append(meta_body(envelope(messages=[text_message(f"wamid.V{i}")],
                                             statuses=[status(f"wamid.VS{i}", "delivered")])))
            valid.append(i)
    with serve(app) as url:
        answers = post_concurrently(url, bodies)
    assert [a.status_code for a in answers] == [200] * len(bodies)
    stored = {r[0] for r in db.execute("SELECT dedup_key FROM wa_outbox.webhook_events")}
    assert {f"m:wamid.V{i}" for i in valid} | {f"s:wamid.VS{i}:delivered" for i in valid} <= stored
    assert len(stored) == 2 * len(valid) + len(bodies) - len(valid)  # and every poison POST too


@pytest.fixture
def refused_key(db):
    """Postgres refuses (as bad data) any row with dedup key m:wamid.REFUSED, and holds any row with key
    m:wamid.SLOW until the test releases advisory lock 4242: a real refusal inside a coalesced INSERT."""
    db.execute("""
        CREATE FUNCTION wa_outbox.test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.dedup_key = 'm:wamid.REFUSED' THEN
                RAISE EXCEPTION 'refused for the test' USING ERRCODE = 'invalid_parameter_value';
            END IF;
            IF NEW.dedup_key = 'm:wamid.SLOW' THEN
                PERFORM pg_advisory_xact_lock_shared(4242);
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_refuse BEFORE INSERT ON wa_outbox.webhook_events
            FOR EACH ROW EXECUTE FUNCTION wa_outbox.test_refuse();""")
    yield
    db.execute("DROP TRIGGER test_refuse ON wa_outbox.webhook_events; DROP FUNCTION wa_outbox.test_refuse()")


def test_a_coalesced_insert_refused_by_postgres_fails_only_the_post_whose_rows_it_refused(app, db, database_url,
                                                                                          refused_key):
    store = app.extensions["wa_outbox.webhook_store"]
    refused = meta_body(envelope(messages=[text_message("wamid.REFUSED")]))
    others = [meta_body(envelope(messages=[text_message(f"wamid.OK{i}")])) for i in range(6)]
    answers: dict[bytes, object] = {}

    def post(body: bytes) -> None:
        answers[body] = post_webhook(app.test_client(), body)

    with psycopg.connect(database_url, autocommit=True) as lock:
        lock.execute("SELECT pg_advisory_lock(4242)")
        slow = threading.Thread(target=post, args=(meta_body(envelope(messages=[text_message("wamid.SLOW")])),))
        slow.start()
        wait_for(lambda: store._busy, what="the first INSERT to run")
        threads = [threading.Thread(target=post, args=(b,)) for b in [refused, *others]]
        for t in threads:
            t.start()
        wait_for(lambda: len(store._queue) == 7, what="seven POSTs queued behind it: one coalesced INSERT")
        lock.execute("SELECT pg_advisory_unlock(4242)")
        for t in [slow, *threads]:
            t.join()
    assert all(answers[b].status_code == 200 for b in others), [answers[b].get_data() for b in others]
    assert answers[refused].status_code == 200  # stored as one dead event rather than a 500
    by_key = {r["dedup_key"]: r for r in rows(db)}
    assert {f"m:wamid.OK{i}" for i in range(6)} | {"m:wamid.SLOW"} <= set(by_key)
    dead = by_key["d:" + hashlib.sha256(refused).hexdigest()]
    assert dead["status"] == "dead" and "refused for the test" in dead["last_error"]
    assert bytes(dead["body"]) == refused
    assert post_webhook(app.test_client(), refused).json["new"] == 0  # a redelivery stores nothing new


def test_an_unreachable_database_still_fails_the_post():
    """Not every failure becomes a dead event: without Postgres nothing is stored, so the POST must fail (a 500) and
    Meta redelivers it."""
    engine = sa.create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none", isolation_level="AUTOCOMMIT",
                              connect_args={"connect_timeout": 1})
    body = with_poison(b'"\\u0000"')
    with pytest.raises(psycopg.OperationalError):
        WebhookStore(engine).store(events_of_body(body), None, body)


# --- fuzz: mutations of the corpus, signed, through the real app; then through the inbound processor ------------------

CORPUS = load_corpus()
# Raw JSON that json.dumps cannot write (or writes only as a Python float): spliced in for a placeholder string.
RAW_POISONS = [b'"a\\u0000b"', b'"\\ud800"', b'"x\\udc00\\ud83d"', b"NaN", b"-Infinity", b"1e400", b"7" * 5000,
               b"-" + b"1" * 5000 + b".5", deep(10_000), deep(300), b'{"a":' * 200 + b"1" + b"}" * 200]
PLAIN_POISONS = ["\x00", "\ud800", "x" * 600, "", 0, -1, 10 ** 30, 1.5, True, None, [], {}, [None], {"id": None}]


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*path, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _paths(child, (*path, index))


def _parent(root, path):
    for step in path[:-1]:
        root = root[step]
    return root


def mutate(payload: dict, rnd: random.Random) -> bytes:
    """One to three mutations: a value replaced by poison, a field dropped or retyped, entries or items duplicated."""
    payload = copy.deepcopy(payload)
    raw = {}
    for _ in range(rnd.randint(1, 3)):
        paths = [p for p in _paths(payload) if p]
        inside = [p for p in paths if len(p) > 5]  # inside a change's value: the envelope is mutated less often
        if not paths:
            break
        path = rnd.choice(inside if inside and rnd.random() < 0.9 else paths)
        parent, key = _parent(payload, path), path[-1]
        op = rnd.randrange(5)
        if op == 0:  # poison json.dumps cannot write, spliced in as raw bytes
            marker = f"@@RAW{len(raw)}@@"
            raw[marker] = rnd.choice(RAW_POISONS)
            parent[key] = marker
        elif op == 1:
            parent[key] = copy.deepcopy(rnd.choice(PLAIN_POISONS))
        elif op == 2 and isinstance(parent, dict):
            del parent[key]
        elif op == 3 and isinstance(parent, dict) and isinstance(parent[key], str):
            # a key that jsonb cannot hold, beside the value
            parent[f"{key}\x00\ud800"] = parent[key]
        elif isinstance(parent, list):  # duplicate an entry, change or item
            parent.insert(rnd.randrange(len(parent) + 1), copy.deepcopy(parent[key]))
        else:
            parent[key] = {"retyped": parent[key]} if rnd.random() < 0.5 else [parent[key]]
    body = json.dumps(payload, separators=(",", ":"))  # ensure_ascii: poison travels as escapes, as Meta sends it
    for marker, fragment in raw.items():
        body = body.replace(json.dumps(marker), fragment.decode("latin-1"))
    return body.encode("latin-1") if raw else body.encode()


class _Number:
    def __init__(self, literal: str):
        self.literal = literal


def envelope_problem(body: bytes) -> str | None:
    """The README's rule, restated: why this body is not a WhatsApp Business Account webhook (400), or None."""
    try:
        payload = json.loads(body, parse_int=_Number, parse_float=_Number, parse_constant=_Number)
    except RecursionError:
        return None if body.lstrip().startswith(b"{") else "not an object"  # JSON too deep: stored dead
    except ValueError:
        return "not JSON"
    if not isinstance(payload, dict) or payload.get("object") != "whatsapp_business_account":
        return "object"
    if not isinstance(payload.get("entry"), list):
        return "entry"
    for entry in payload["entry"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("changes"), list):
            return "changes"
        for change in entry["changes"]:
            if not isinstance(change, dict) or not isinstance(change.get("value"), dict):
                return "change"
            if not isinstance(change.get("field"), str) or not change["field"]:
                return "field"
            if change["field"] in ("messages", "smb_message_echoes"):
                for name in ("messages", "message_echoes", "statuses"):
                    items = change["value"].get(name, [])
                    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                        return name
    return None


FUZZ_EXAMPLES, FUZZ_POSTS_PER_EXAMPLE = 400, 5


def fuzz(post) -> None:
    """2,000 signed mutations of the corpus (the same ones every run), each handed to `post`."""
    @hypothesis_settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
                         suppress_health_check=[HealthCheck.too_slow])
    @given(names=st.lists(st.sampled_from(sorted(CORPUS)), min_size=FUZZ_POSTS_PER_EXAMPLE,
                          max_size=FUZZ_POSTS_PER_EXAMPLE), rnd=st.randoms(use_true_random=False))
    def run(names, rnd):
        for name in names:
            post(mutate(CORPUS[name], rnd))
    run()


def test_fuzz_every_signed_json_post_is_answered_and_stored_and_a_repost_stores_nothing(client, db):
    seen = {"posts": 0, "stored": 0}

    def post(body: bytes) -> None:
        before = count(db)
        r = post_webhook(client, body)
        assert r.status_code < 500, (r.status_code, body[:300])
        problem = envelope_problem(body)
        if problem:
            assert r.status_code == 400, (problem, body[:300])
            assert count(db) == before
        else:
            assert r.status_code == 200, (r.get_data(), body[:300])
            assert r.json["received"] == r.json["new"] + r.json["duplicate"]
            assert count(db) == before + r.json["new"]
            again = post_webhook(client, body)
            assert (again.status_code, again.json["new"]) == (200, 0), body[:300]
            assert count(db) == before + r.json["new"]
            seen["stored"] += 1
        seen["posts"] += 1

    fuzz(post)
    assert seen["posts"] >= FUZZ_EXAMPLES * FUZZ_POSTS_PER_EXAMPLE
    assert seen["stored"] > seen["posts"] // 2  # the mutations mostly keep the envelope
    kept = db.execute("SELECT count(*) FILTER (WHERE raw_body_sha256 IS NOT NULL), count(*) FILTER "
                      "(WHERE status = 'dead') FROM wa_outbox.webhook_events").fetchone()
    assert kept[0] > 0 and kept[1] > 0  # sanitized and dead events were among them


def test_fuzz_every_stored_event_ends_done_or_dead_in_the_inbound_processor(client, db, settings, database_url):
    from wa_outbox.db import create_engine
    from wa_outbox.worker._inbound import InboundProcessor

    fuzz(lambda body: post_webhook(client, body))
    assert count(db) > 0
    policy = dataclasses.replace(settings, retry_base_seconds=0.01, retry_max_seconds=0.05,
                                 max_attempts=3).retry_policy()
    engine = create_engine(database_url, pool_size=2, application_name="fuzz-inbound", isolation_level="AUTOCOMMIT")
    try:
        processor = InboundProcessor(engine, "fuzz-worker", [json.dumps], policy, 30.0)
        for _ in range(20):
            while processor.process_batch():
                pass
            if not db.execute("UPDATE wa_outbox.webhook_events SET next_attempt_at = now() WHERE status = 'queued'"
                              ).rowcount:
                break
    finally:
        engine.dispose()
    left = db.execute("SELECT status, count(*) FROM wa_outbox.webhook_events WHERE status NOT IN ('done', 'dead') "
                      "GROUP BY status").fetchall()
    assert left == []
    assert db.execute("SELECT count(*) FROM wa_outbox.webhook_events WHERE status = 'dead' AND last_error IS NULL"
                      ).fetchone()[0] == 0
