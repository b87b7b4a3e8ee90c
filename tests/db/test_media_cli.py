"""`wa-outbox media show|get` and the media step of `wa-outbox prune` (click's runner, real Postgres, the Postgres
store): the bytes written whole, states said, old media gone with their chunks."""

from __future__ import annotations

import hashlib
import json
import os

import psycopg
import pytest

from wa_outbox import media_store

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
