"""`wa-outbox media show|get` and the media step of `wa-outbox prune` (click's runner, real Postgres, the Postgres
store): the bytes written whole, states said, old media gone with their chunks."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from datetime import UTC, datetime

import psycopg
import pytest

from wa_outbox import media_store, queries, upload_media
from wa_outbox.db import create_engine
from wa_outbox.enqueue import enqueue
from wa_outbox.media_retention import prune_media

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DATA = os.urandom(3 * media_store.CHUNK_BYTES + 12345)  # several chunks, the last one short


def add_media(database_url: str, *, meta_id: str, state: str = "stored", days_old: int = 0,
              data: bytes | None = DATA) -> int:
    with psycopg.connect(database_url) as conn:
        media_id = conn.execute(
            "INSERT INTO wa_outbox.media (direction, meta_media_id, phone_number_id, wa_id, kind, mime_type, "
            "filename, state, created_at) VALUES ('inbound', %s, '100000000000001', '5511912345678', 'document', "
            "'application/pdf', 'a.pdf', 'pending', now() - make_interval(days => %s)) RETURNING id",
            (meta_id, days_old)).fetchone()[0]
        if state == "stored" and data is not None:
            stored = media_store.PostgresStore().put(conn, media_id, [data])
            conn.execute("UPDATE wa_outbox.media SET state = 'stored', store = 'postgres', size = %s, sha256 = %s "
                         "WHERE id = %s", (stored.size, stored.sha256, media_id))
        else:
            conn.execute("UPDATE wa_outbox.media SET state = %s WHERE id = %s", (state, media_id))
    return media_id


def test_show_and_get_by_either_id(run, database_url, tmp_path):
    own = add_media(database_url, meta_id="1003383421387256")
    shown = json.loads(run("media", "show", "1003383421387256", "--json").output)
    assert shown["id"] == own and shown["state"] == "stored" and shown["size"] == len(DATA)
    assert shown["sha256"] == hashlib.sha256(DATA).hexdigest() and "store_key" not in shown
    text = run("media", "show", str(own)).output
    assert "stored" in text and "application/pdf" in text
    target = tmp_path / "out.pdf"
    result = run("media", "get", str(own), "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_bytes() == DATA
    assert not (tmp_path / "out.pdf.part").exists()
    to_stdout = run("media", "get", "1003383421387256")
    assert to_stdout.stdout_bytes == DATA


@pytest.mark.parametrize("state", ["pending", "failed", "expired", "too_large"])
def test_get_of_media_not_stored_says_its_state(run, database_url, tmp_path, state):
    add_media(database_url, meta_id="77", state=state, data=None)
    result = run("media", "get", "77", "-o", str(tmp_path / "x"))
    assert result.exit_code != 0 and f"not stored: {state}" in result.output
    assert not (tmp_path / "x").exists()


def test_unknown_ids_are_refused(run):
    for given in ("999", "x" * 200):
        result = run("media", "show", given)
        assert result.exit_code != 0 and "Traceback" not in result.output


def test_prune_removes_media_by_age_with_its_chunks(run, database_url, db):
    old = add_media(database_url, meta_id="1", days_old=40)
    add_media(database_url, meta_id="2", days_old=40, state="failed", data=None)
    kept = add_media(database_url, meta_id="3", days_old=2)
    result = run("prune", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["media"] == 2
    assert [r[0] for r in db.execute("SELECT id FROM wa_outbox.media").fetchall()] == [kept]
    assert db.execute("SELECT count(*) FROM wa_outbox.media_chunks WHERE media_id = %s", (old,)).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM wa_outbox.media_chunks WHERE media_id = %s", (kept,)).fetchone()[0] == 4


def add_upload(database_url: str, *, days_old: int) -> int:
    """An outbound file as an app hands it over (upload_media), made `days_old` days old."""
    with psycopg.connect(database_url) as conn:
        media_id = upload_media(conn, b"%PDF-1.7 invoice", "application/pdf", "invoice.pdf")
        conn.execute("UPDATE wa_outbox.media SET created_at = now() - make_interval(days => %s) WHERE id = %s",
                     (days_old, media_id))
    return media_id


def document(upload: int) -> dict:
    return {"type": "document", "document": {"upload": upload, "filename": "invoice.pdf"}}


def test_prune_removes_an_old_upload_only_once_no_message_names_it(run, database_url, db, sender):
    unused, named, named_by_dead, recent = (add_upload(database_url, days_old=d) for d in (40, 40, 40, 2))
    queued = enqueue(db, to="+5511900000001", message=document(named))
    dead = enqueue(db, to="+5511900000002", message=document(named_by_dead))
    # the operator's dead-letter queue may still retry it: its file stays
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead' WHERE id = %s", (dead,))
    result = run("prune", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["media"] == 1
    assert {r[0] for r in db.execute("SELECT id FROM wa_outbox.media")} == {named, named_by_dead, recent}
    assert unused not in {r[0] for r in db.execute("SELECT media_id FROM wa_outbox.media_chunks")}
    # once its message is gone (pruned by its own retention), the file goes with the next prune
    db.execute("DELETE FROM wa_outbox.notifications WHERE id = %s", (queued,))
    assert json.loads(run("prune", "--json").output.strip().splitlines()[-1])["media"] == 1
    assert {r[0] for r in db.execute("SELECT id FROM wa_outbox.media")} == {named_by_dead, recent}


def test_prune_passes_over_named_files_to_reach_the_ones_behind_them(database_url, db, settings, sender):
    named = [add_upload(database_url, days_old=50) for _ in range(3)]
    for i, upload in enumerate(named):
        enqueue(db, to=f"+551190000000{i}", message=document(upload))
    behind = [add_upload(database_url, days_old=40) for _ in range(3)]
    engine = create_engine(database_url, pool_size=1)
    try:
        assert prune_media(engine, settings, days=30, batch_size=2) == 3  # batches of 2: the 3 named never stop it
    finally:
        engine.dispose()
    assert {r[0] for r in db.execute("SELECT id FROM wa_outbox.media")} == set(named)
    assert not set(behind) & {r[0] for r in db.execute("SELECT id FROM wa_outbox.media")}


def test_a_file_being_named_by_a_new_message_is_not_pruned_under_it(database_url, db, sender):
    """The enqueue's check locks the file until its message commits; a prune meanwhile passes over it, and after
    that commit sees the message."""
    upload = add_upload(database_url, days_old=40)
    with psycopg.connect(database_url) as app, psycopg.connect(database_url) as pruner:
        enqueue(app, to="+5511900000001", message=document(upload))  # not committed yet
        with pruner.transaction():
            assert queries.prune_media_lock(pruner, limit=10, days=30, after_at=_EPOCH, after_id=0) == []
        app.commit()
        with pruner.transaction():
            locked = queries.prune_media_lock(pruner, limit=10, days=30, after_at=_EPOCH, after_id=0)
            assert [m.id for m in locked] == [upload]
            assert queries.prune_media_batch(pruner, ids=[upload]) == []  # named: it stays
    assert db.execute("SELECT count(*) FROM wa_outbox.media WHERE id = %s", (upload,)).fetchone()[0] == 1


def test_a_message_enqueued_while_its_file_is_pruned_is_refused(database_url, db, sender):
    """The other order: the prune holds the file's lock first; the enqueue waits for it, then finds no file."""
    upload = add_upload(database_url, days_old=40)
    outcome: list[BaseException | int] = []
    with psycopg.connect(database_url) as pruner:
        with pruner.transaction():
            locked = queries.prune_media_lock(pruner, limit=10, days=30, after_at=_EPOCH, after_id=0)
            assert [m.id for m in locked] == [upload]

            def app() -> None:
                try:
                    with psycopg.connect(database_url, autocommit=True) as conn:
                        outcome.append(enqueue(conn, to="+5511900000001", message=document(upload)))
                except Exception as exc:  # noqa: BLE001 - the outcome under test
                    outcome.append(exc)

            waiting = threading.Thread(target=app)
            waiting.start()
            waiting.join(0.5)
            assert waiting.is_alive() and not outcome  # it waits for the prune's transaction
            assert [m.id for m in queries.prune_media_batch(pruner, ids=[upload])] == [upload]
        waiting.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Exception) and f"unknown upload {upload}" in str(outcome[0])
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 0


