"""WA_OUTBOX_DB_PREPARED_STATEMENTS=false and WA_OUTBOX_LISTEN=false: the service behind PgBouncer in transaction mode.

PgBouncer before 1.21 (Debian 12 ships 1.18) hands each transaction any server connection, so a statement psycopg
prepared on one is missing on the next, or already exists there under the same name. With the switch, no connection
the service opens prepares anything; the integration test runs migrations, gunicorn, a worker and the CLI through a
real PgBouncer in transaction mode that the test starts (skipped, saying why, where pgbouncer is not installed:
Debian `apt-get install pgbouncer`).
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import requests
from psycopg import conninfo

from tests.conftest import API_TOKEN, APP_SECRET, create_scratch_database, drop_database
from tests.live import SENDER, wait_for
from tests.processes import free_port, service_env, wait_until_up
from wa_outbox import db
from wa_outbox.config import ConfigError, Settings
from wa_outbox.simulator import SimulatorServer

ROOT = Path(__file__).resolve().parents[2]
ACCESS_TOKEN = "test-access-token"


@pytest.mark.parametrize("variable, field", [("WA_OUTBOX_DB_PREPARED_STATEMENTS", "db_prepared_statements"),
                                             ("WA_OUTBOX_LISTEN", "listen")])
def test_the_switches_are_read_and_a_bad_value_is_refused_in_one_line(variable, field):
    assert getattr(Settings.from_env({}), field) is True
    assert getattr(Settings.from_env({variable: "false"}), field) is False
    assert getattr(Settings.from_env({variable: "off"}), field) is False
    with pytest.raises(ConfigError, match=f"^{variable}='maybe' is not valid: expected true or false"):
        Settings.from_env({variable: "maybe"})


def prepared_on(connection: psycopg.Connection) -> int:
    """Statements prepared on this connection's server session (none through pgbouncer: asked directly)."""
    return connection.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]


@pytest.mark.parametrize("prepared", [True, False])
def test_without_prepared_statements_no_connection_prepares_anything(database_url, settings, prepared):
    """The pools (web, worker, CLI: db.create_engine) and one-off connections (db.connect) alike; with the default,
    the same calls do prepare, so the check can fail."""
    chosen = dataclasses.replace(settings, db_prepared_statements=prepared)
    engine = db.create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT",
                              prepared_statements=chosen.db_prepared_statements)
    try:
        for _ in range(8):  # past psycopg's prepare_threshold (5)
            db.fetch(engine, "schema_version")
        with engine.connect() as conn:
            assert (prepared_on(conn.connection.driver_connection) > 0) is prepared
    finally:
        engine.dispose()
    with db.connect(chosen, autocommit=True) as conn:
        for _ in range(8):
            conn.execute(db.query("schema_version")).fetchone()
        assert (prepared_on(conn) > 0) is prepared


@pytest.mark.parametrize("prepared", [True, False])
def test_the_web_app_without_prepared_statements_prepares_nothing(settings, database_url, sender, prepared):
    from wa_outbox.web import create_app
    app = create_app(dataclasses.replace(settings, db_prepared_statements=prepared), metrics=False)
    client = app.test_client()
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    for i in range(8):
        answer = client.post("/v1/messages", headers=headers,
                             json={"to": f"+55119000000{i:02d}", "message": {"type": "text", "text": {"body": "oi"}}})
        assert answer.status_code == 202, answer.json
        assert client.get(f"/v1/messages/{answer.json['id']}", headers=headers).status_code == 200
    engine = app.extensions["wa_outbox.engine"]
    try:
        with engine.connect() as conn:
            assert (prepared_on(conn.connection.driver_connection) > 0) is prepared
    finally:
        engine.dispose()


def test_without_listen_the_worker_finds_its_work_by_polling(settings, sim, sender, db):
    from tests.live import running_worker, worker_settings
    from wa_outbox.enqueue import enqueue
    with running_worker(worker_settings(settings, sim.base_url, listen=False, poll_interval=0.2)) as worker:
        assert "listener" not in [thread.name for thread in worker._threads]
        ids = [enqueue(db, to=f"+55119{i:08d}", message={"type": "text", "text": {"body": "oi"}}) for i in range(3)]
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status <> 'queued' AND "
                                    "status <> 'sending' AND id = ANY(%s)", (ids,)).fetchone()[0] == 3,
                 what="the messages sent without LISTEN")


# --- through a real PgBouncer in transaction mode ---------------------------------------------------------------------

PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)


def _bouncer_version() -> tuple[int, int]:
    out = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"PgBouncer (\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


@pytest.fixture
def bouncer(server_url, tmp_path):
    """A scratch database and PgBouncer (transaction mode, 2 server connections) in front of it: yields
    (URL through pgbouncer, direct URL). PgBouncer refuses to run as root: then it runs as `nobody`."""
    if not PGBOUNCER:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    server = conninfo.conninfo_to_dict(server_url)
    user = str(server.get("user") or pwd.getpwuid(os.getuid()).pw_name)
    target = " ".join(f"{key}={value}" for key, value in (
        ("host", server.get("host") or "/var/run/postgresql"), ("port", server.get("port") or 5432),
        ("user", user), ("password", server.get("password"))) if value)
    host = str(server.get("host") or "/var/run/postgresql")
    if os.geteuid() == 0 and host.startswith("/") and not os.stat(host).st_mode & 0o001:  # others may not enter
        pytest.skip(f"as root PgBouncer runs as nobody, who cannot reach the server's socket in {host} (the "
                    "embedded Postgres listens there only); the suite's run against a TCP server covers this")
    port = free_port()
    (tmp_path / "users.txt").write_text(f'"{user}" ""\n')
    (tmp_path / "pgbouncer.ini").write_text(f"""[databases]
* = {target}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {tmp_path / "users.txt"}
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
{"user = nobody" if os.geteuid() == 0 else ""}
""")
    name = create_scratch_database(server_url)
    with (tmp_path / "pgbouncer.log").open("w") as log:  # its log on stderr: a logfile could not be opened as nobody
        proc = subprocess.Popen([PGBOUNCER, str(tmp_path / "pgbouncer.ini")], stdout=log, stderr=subprocess.STDOUT)
    url = f"postgresql://{user}@127.0.0.1:{port}/{name}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                psycopg.connect(url, connect_timeout=2).close()
                break
            except psycopg.OperationalError as exc:
                log = (tmp_path / "pgbouncer.log").read_text() if (tmp_path / "pgbouncer.log").exists() else ""
                if proc.poll() is not None or time.monotonic() > deadline:
                    # Installed and in front of a server it can reach (the case it cannot is skipped above): not
                    # coming up is a failure of this setup, not a reason to skip.
                    pytest.fail(f"pgbouncer did not come up in front of {target.split()[0]}: {exc} {log[-300:]}")
                time.sleep(0.1)
        yield url, conninfo.make_conninfo(server_url, dbname=name), tmp_path / "pgbouncer.log"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        drop_database(server_url, name)


def test_pgbouncer_before_1_21_breaks_prepared_statements_in_transaction_mode(bouncer):
    """Why the switch exists (and proof the bouncer below is really in transaction mode): the default fails."""
    url, _, _ = bouncer
    if _bouncer_version() >= (1, 21):
        pytest.skip("this PgBouncer tracks prepared statements itself (1.21+)")
    first, second = db.connect(Settings(database_url=url), autocommit=True), db.connect(
        Settings(database_url=url), autocommit=True)
    with first, second, pytest.raises(psycopg.errors.DuplicatePreparedStatement):
        for _ in range(8):
            for conn in (first, second):
                conn.execute("SELECT %(n)s::integer + 1", {"n": 1}).fetchone()


def test_the_whole_flow_through_pgbouncer_in_transaction_mode(bouncer):
    """Migrations, gunicorn, a worker and the CLI, all through PgBouncer with both switches: every message is sent
    and its statuses recorded, no statement is prepared, and the worker finds its work by polling alone."""
    url, direct, log = bouncer
    switches = {"WA_OUTBOX_DB_PREPARED_STATEMENTS": "false", "WA_OUTBOX_LISTEN": "false"}
    env = service_env(url, WHATSAPP_PHONE_NUMBER_ID=SENDER, WHATSAPP_ACCESS_TOKEN=ACCESS_TOKEN, **switches)
    cli = [sys.executable, "-m", "wa_outbox.cli"]
    upgraded = subprocess.run([*cli, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120)
    assert upgraded.returncode == 0, upgraded.stderr + upgraded.stdout

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    processes: list[subprocess.Popen] = []
    with SimulatorServer(access_token=ACCESS_TOKEN, app_secret=APP_SECRET, webhook_url=f"{base}/webhooks/whatsapp",
                         status_delays_ms=(20, 40, 60), seed=7) as sim:
        try:
            processes.append(subprocess.Popen([*cli, "web"], env={**env, "WA_OUTBOX_BIND": f"127.0.0.1:{port}"},
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            wait_until_up(f"{base}/readyz", processes[0])
            processes.append(subprocess.Popen(
                [*cli, "worker"], env={**env, "WHATSAPP_API_BASE_URL": sim.base_url, "WA_OUTBOX_POLL_INTERVAL": "0.2",
                                       "WA_OUTBOX_WORKER_CONCURRENCY": "4"},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            headers = {"Authorization": f"Bearer {API_TOKEN}"}
            ids = []
            for i in range(20):
                answer = requests.post(f"{base}/v1/messages", headers=headers, timeout=10, json={
                    "to": f"+55119{i:08d}", "message": {"type": "text", "text": {"body": f"pedido {i}"}}})
                assert answer.status_code == 202, answer.text
                ids.append(answer.json()["id"])
            with psycopg.connect(direct, autocommit=True) as check:
                wait_for(lambda: check.execute(
                    "SELECT count(*) FROM wa_outbox.notifications WHERE status = 'read'").fetchone()[0] == len(ids),
                    timeout=60, what="every message sent, delivered and read, through pgbouncer")
            # each sent once (a claim may be given back unsent and claimed again on a busy machine: count arrivals)
            assert sorted(m["wa_id"] for m in sim.messages()) == [f"55119{i:08d}" for i in range(len(ids))]
            assert requests.get(f"{base}/v1/messages/{ids[0]}", headers=headers, timeout=10).json()["status"] == "read"
            for command in (["status", str(ids[0])], ["dlq", "list"],
                            ["db", "query", "SELECT count(*) AS n FROM wa_outbox.notifications"]):
                done = subprocess.run([*cli, *command], env=env, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines() == ["n", str(len(ids))]
        finally:
            outputs = []
            for proc in reversed(processes):
                proc.send_signal(signal.SIGTERM)
                outputs.append(proc.communicate(timeout=40)[0])
    for proc, output in zip(reversed(processes), outputs, strict=True):
        assert proc.returncode == 0, output
        assert "prepared statement" not in output, output
