"""The CLI for people and scripts: results on stdout (`--json` on every command that prints data), logs on stderr, a
help line for every command, `--version`, consistent exit codes, alembic's revision words for `db`; and the log
formats (LOG_FORMAT=json|console)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.db.test_cli import make_dead
from wa_outbox import __version__, cli, logs, migrate

ROOT = Path(__file__).resolve().parents[2]


def send(run, to: str = "+5511987654321") -> int:
    return int(run("send", "--to", to, "--text", "x", "--correlation-id", "corr-1").output.split("\t")[0])


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_version():
    r = CliRunner().invoke(cli.main, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"wa-outbox {__version__}"


def test_every_command_has_a_help_line():
    def walk(group: click.Group, path: str):
        for name, command in group.commands.items():
            yield f"{path} {name}", command
            if isinstance(command, click.Group):
                yield from walk(command, f"{path} {name}")
    missing = [name for name, command in walk(cli.main, "wa-outbox") if not command.get_short_help_str().strip()]
    assert missing == []


def test_json_on_every_command_that_prints_data(run, db):
    nid = send(run)
    make_dead(db, nid)
    status = json_lines(run("status", str(nid), "--json").output)
    assert status[0]["id"] == nid and status[0]["status"] == "dead" and status[0]["timeline"]
    by_phone = json_lines(run("status", "+5511987654321", "--json").output)
    assert [m["id"] for m in by_phone] == [nid]
    listed = run("dlq", "list", "--json")
    assert [m["id"] for m in json_lines(listed.stdout)] == [nid]
    shown = json_lines(run("dlq", "show", str(nid), "--json").output)
    assert shown[0]["last_error"]["code"] == 131026
    run("ratelimit", "set", "100000000000001", "--mps", "20")
    limits = json_lines(run("ratelimit", "show", "--json").output)
    assert limits[0]["phone_number_id"] == "100000000000001" and limits[0]["mps"] == 20
    missing = run("status", "nobody-at-all", "--json")
    assert missing.exit_code == 1 and "no message matches" in missing.output


def test_purge_of_a_missing_or_live_id_fails_as_retry_does(run, db):
    dead, live = send(run, "+5511987654321"), send(run, "+5511987654322")
    make_dead(db, dead)
    for command in ("retry", "purge"):
        r = run("dlq", command, "999999")
        assert r.exit_code == 1 and "999999" in r.output, (command, r.output)
    r = run("dlq", "purge", str(dead), str(live))
    assert r.exit_code == 1 and "purged 1" in r.output and str(live) in r.output.splitlines()[-1]
    assert db.execute("SELECT array_agg(id) FROM wa_outbox.notifications").fetchone()[0] == [live]
    assert run("dlq", "purge", str(dead)).exit_code == 1  # already gone


def test_db_takes_alembic_revision_words(scratch_url):
    env = {"DATABASE_URL": scratch_url}
    runner = CliRunner()
    revisions = migrate.revisions()
    up = runner.invoke(cli.main, ["db", "upgrade", revisions[0]], env=env)
    assert up.exit_code == 0 and up.output.strip() == f"wa-outbox: schema at {revisions[0]}", up.output
    up = runner.invoke(cli.main, ["db", "upgrade", "head"], env=env)
    assert up.output.strip() == f"wa-outbox: schema at head ({revisions[-1]})"
    down = runner.invoke(cli.main, ["db", "downgrade", "-1"], env=env)
    assert down.exit_code == 0 and down.output.strip() == f"wa-outbox: schema at {revisions[-2]}", down.output
    base = runner.invoke(cli.main, ["db", "downgrade", "base"], env=env)
    assert base.output.strip() == "wa-outbox: schema at base"
    import psycopg
    with psycopg.connect(scratch_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'wa_outbox'").fetchone()[0] == 0


@pytest.fixture
def scratch_url(server_url):
    from tests.conftest import _with_dbname, create_scratch_database, drop_database
    name = create_scratch_database(server_url, "wa_outbox_cli")
    yield _with_dbname(server_url, name)
    drop_database(server_url, name)


def test_results_on_stdout_and_logs_on_stderr(database_url, db):
    env = {"DATABASE_URL": database_url, "LOG_LEVEL": "DEBUG", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "ratelimit", "show", "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # no senders yet: no rows, and nothing else on stdout
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens) VALUES ('1', 5, 5, 5)")
    done = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "ratelimit", "show", "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert [r["phone_number_id"] for r in json_lines(done.stdout)] == ["1"]


# --- log formats -----------------------------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _log_through(fmt: str | None, stream) -> str:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure("INFO", fmt, stream)
        logging.getLogger("wa_outbox.worker").warning("message %s dead", 17, extra={"notification_id": 17,
                                                                                   "phone_number_id": "1"})
        logs.events.debug("message %s read", 17)
        logging.getLogger("alembic.runtime.migration").info("Running upgrade  -> 0001")
        logging.getLogger("pgserver").info("initdb output")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
        logs.events.setLevel(logging.NOTSET)
    return stream.getvalue()


def test_log_format_json_for_pipes_console_for_terminals_or_as_set():
    piped = _log_through(None, io.StringIO())
    records = json_lines(piped)
    assert [r["message"] for r in records] == ["message 17 dead"]  # the narrative is DEBUG in JSON at INFO
    assert records[0]["level"] == "WARNING" and records[0]["notification_id"] == 17
    console = _log_through(None, _Terminal())
    lines = console.splitlines()
    assert len(lines) == 2 and "WARN message 17 dead" in lines[0] and "phone_number_id=1" in lines[0]
    assert "message 17 read" in lines[1]
    assert "Running upgrade" not in console and "initdb" not in console
    assert json_lines(_log_through("json", _Terminal()))[0]["message"] == "message 17 dead"
    assert "message 17 read" in _log_through("console", io.StringIO())
