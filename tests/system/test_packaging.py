"""Installed as a package: a wheel built from this checkout, installed with pip into a fresh virtualenv outside it,
migrates, serves, works and type-checks with nothing of the checkout around.

Slow (a wheel build and a pip install into a new virtualenv: about a minute), and in the default suite. Skipped, with
the reason, only when pip cannot reach a package index to install the dependencies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import psycopg
import pytest
import requests

from tests.conftest import API_TOKEN, APP_SECRET, _with_dbname, create_scratch_database, drop_database
from tests.live import wait_for
from tests.processes import free_port
from wa_outbox import migrate

ROOT = Path(__file__).resolve().parents[2]
TYPED_USAGE = Path(__file__).parents[1] / "typed_usage.py"
# What pip prints when it cannot reach an index (or the index lacks a dependency): a machine problem, not ours.
_NO_INDEX = re.compile(r"No matching distribution found|Could not find a version that satisfies|"
                       r"Failed to establish a new connection|Temporary failure in name resolution|"
                       r"Network is unreachable|ProxyError|ConnectTimeoutError|ReadTimeoutError", re.I)
# Not part of the package: the checkout's own tooling and caches.
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", ".wa-outbox", "build", "dist", "*.egg-info", "__pycache__",
                                     "*.pyc", ".pytest_cache", ".mypy_cache", "bench", "tests")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built with pip from a copy of the checkout (a stale build/ directory cannot leak into it)."""
    source = tmp_path_factory.mktemp("source") / "wa-outbox"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    out = tmp_path_factory.mktemp("wheelhouse")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(out)],
                           capture_output=True, text=True, timeout=600)
    _skip_without_index(built, "build the wheel (setuptools, wheel)")
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("wa_outbox-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv (no system site-packages) in a temporary directory, with the wheel and its dependencies
    installed by pip from the machine's configured index: returns its bin directory."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_dir = venv / "bin"
    done = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                           f"{wheel}[simulator,embedded]"], capture_output=True, text=True, timeout=900,
                          cwd=venv.parent, env=_env())
    _skip_without_index(done, "install the wheel's dependencies")
    assert done.returncode == 0, done.stdout + done.stderr
    return bin_dir


def _skip_without_index(done: subprocess.CompletedProcess, doing: str) -> None:
    found = _NO_INDEX.search(done.stdout + done.stderr) if done.returncode != 0 else None
    if found:
        pytest.skip(f"pip could not {doing}: no package index reachable ({found.group(0)})")


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """A working directory with nothing of the checkout in it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


@pytest.fixture
def scratch_url(server_url):
    name = create_scratch_database(server_url, prefix="wa_outbox_packaging")
    yield _with_dbname(server_url, name)
    drop_database(server_url, name)


def _env(**extra: str) -> dict[str, str]:
    """The environment without anything pointing into the checkout or its virtualenv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WHATSAPP_", "WA_OUTBOX_", "PYTHON", "VIRTUAL_ENV", "PROMETHEUS_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(ROOT)))
    env.update(extra)
    return env


def _service_env(bin_dir: Path, database_url: str, **extra: str) -> dict[str, str]:
    return _env(**{"PATH": f"{bin_dir}{os.pathsep}{_env()['PATH']}", "DATABASE_URL": database_url,
                   "WHATSAPP_APP_SECRET": APP_SECRET, "WHATSAPP_VERIFY_TOKEN": "vt", "WA_OUTBOX_API_TOKENS": API_TOKEN,
                   "WHATSAPP_ACCESS_TOKEN": "test-access-token", "WHATSAPP_PHONE_NUMBER_ID": "100000000000001",
                   "WHATSAPP_API_BASE_URL": "http://127.0.0.1:9/v23.0", "WA_OUTBOX_DRY_RUN": "true",
                   "WEB_CONCURRENCY": "1", "WA_OUTBOX_WEB_THREADS": "2", **extra})


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


class _Started:
    """A process started in its own session, stopped (SIGTERM, then SIGKILL to its group) on exit."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.proc.args} exited {self.proc.returncode}: {self.proc.communicate()[0]}")
        return True

    def __enter__(self) -> _Started:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.communicate()


def _checkout_files(directory: Path) -> list[Path]:
    return sorted(p.relative_to(directory) for p in directory.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def test_the_wheel_carries_every_file_and_no_top_level_migrations(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    top_level = {name.split("/", 1)[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"wa_outbox"}, top_level
    missing = [f"wa_outbox/{p}" for p in _checkout_files(ROOT / "wa_outbox")
               if f"wa_outbox/{p.as_posix()}" not in names]
    missing += [f"migrations/{p} (as wa_outbox/_migrations/{p})" for p in _checkout_files(ROOT / "migrations")
                if f"wa_outbox/_migrations/{p.as_posix()}" not in names]
    assert not missing, "not in the wheel (widen setup.cfg's package_data):\n" + "\n".join(missing)
    assert "wa_outbox/py.typed" in names
    # the MIT licence travels in the metadata (setup.cfg's license_files)
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    assert "License-File: LICENSE" in zipfile.ZipFile(wheel).read(metadata).decode()
    assert any(n.endswith((".dist-info/licenses/LICENSE", ".dist-info/LICENSE")) for n in names), names


def test_the_installed_cli_migrates_serves_and_works(installed, scratch_url, elsewhere):
    env = _service_env(installed, scratch_url)
    where = _run([str(installed / "python"), "-c", "import wa_outbox, wa_outbox.migrate as m; "
                  "print(wa_outbox.__file__); print(m.MIGRATIONS_DIR)"], elsewhere, env)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(installed.parent)) for line in where.stdout.split()), where.stdout

    shown = _run(["wa-outbox", "--help"], elsewhere, env)
    assert shown.returncode == 0 and "worker" in shown.stdout and "db" in shown.stdout, shown.stderr
    shown = _run(["wa-outbox", "dev", "--help"], elsewhere, env)
    assert shown.returncode == 0 and "--simulator-port" in shown.stdout, shown.stderr

    upgraded = _run(["wa-outbox", "db", "upgrade"], elsewhere, env)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    with psycopg.connect(scratch_url, autocommit=True) as db:
        assert db.execute("SELECT version_num FROM wa_outbox.alembic_version").fetchone()[0] == migrate.head()

        port = free_port()
        with _Started(["wa-outbox", "web", "--port", str(port)], elsewhere, env) as web, \
                _Started(["wa-outbox", "worker"], elsewhere, env) as worker:
            base = f"http://127.0.0.1:{port}"
            wait_for(lambda: web.alive() and _answers(f"{base}/readyz"), timeout=90, what="wa-outbox web /readyz")
            assert requests.get(f"{base}/readyz", timeout=10).status_code == 200
            described = requests.get(f"{base}/v1/openapi.json", timeout=10)
            assert described.status_code == 200 and "/v1/messages" in described.json()["paths"]
            wait_for(lambda: worker.alive() and db.execute(
                "SELECT count(*) FROM wa_outbox.workers WHERE state = 'running'").fetchone()[0],
                timeout=90, what="the worker's heartbeat row")
            worker.proc.send_signal(signal.SIGTERM)
            assert worker.proc.wait(timeout=60) == 0


def test_the_installed_dev_command_runs_the_whole_stack(installed, scratch_url, elsewhere):
    """`wa-outbox dev` from the wheel: migrations, web, worker and the simulator, a message sent through them."""
    env = _env(PATH=f"{installed}{os.pathsep}{_env()['PATH']}", DATABASE_URL=scratch_url, WEB_CONCURRENCY="1")
    port, simulator_port = free_port(), free_port()
    with _Started(["wa-outbox", "dev", "--port", str(port), "--simulator-port", str(simulator_port),
                   "--status-delay-ms", "20"], elsewhere, env) as dev:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: dev.alive() and _answers(f"{base}/readyz"), timeout=120, what="wa-outbox dev's web /readyz")
        auth = {"Authorization": "Bearer dev-api-token-0123456789"}
        queued = requests.post(f"{base}/v1/messages", headers=auth, timeout=10, json={
            "to": "+5511987654321", "message": {"type": "text", "text": {"body": "from the wheel"}}})
        assert queued.status_code == 202, queued.text
        wait_for(lambda: dev.alive() and requests.get(f"{base}/v1/messages/{queued.json()['id']}", headers=auth,
                                                      timeout=10).json()["status"] == "read",
                 timeout=120, interval=0.5, what="the message to be sent to the simulator and read")
        dev.proc.send_signal(signal.SIGINT)
        assert dev.proc.wait(timeout=60) == 0


def test_a_heroku_style_release_from_the_wheel_with_honcho(installed, scratch_url, elsewhere):
    """The repository's Procfile run by honcho as Heroku runs it, from the wheel's virtualenv in a directory holding
    only that Procfile: the release phase first (`honcho start release`, a one-off that must exit 0), then `honcho
    start web worker` on PORT; /readyz answers and a message sent through it reaches the simulator and is read."""
    honcho = Path(sys.executable).parent / "honcho"
    if not honcho.exists():
        pytest.skip("honcho is not installed (it is in the dev extras)")
    shutil.copy(ROOT / "Procfile", elsewhere / "Procfile")
    port, simulator_port = free_port(), free_port()
    env = _service_env(installed, scratch_url, WA_OUTBOX_DRY_RUN="false",
                       WHATSAPP_API_BASE_URL=f"http://127.0.0.1:{simulator_port}/v23.0")
    released = _run([str(honcho), "start", "release"], elsewhere, env, timeout=300)
    assert released.returncode == 0, released.stdout + released.stderr
    assert "release.1 stopped (rc=0)" in released.stdout, released.stdout
    with psycopg.connect(scratch_url, autocommit=True) as db:
        assert db.execute("SELECT version_num FROM wa_outbox.alembic_version").fetchone()[0] == migrate.head()
    with _Started(["wa-outbox", "simulator", "--port", str(simulator_port), "--status-delay-ms", "20",
                   "--webhook-url", f"http://127.0.0.1:{port}/webhooks/whatsapp"], elsewhere, env) as simulator, \
            _Started([str(honcho), "start", "--port", str(port), "web", "worker"], elsewhere, env) as processes:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: simulator.alive() and processes.alive() and _answers(f"{base}/readyz"), timeout=120,
                 what="honcho's web /readyz")
        auth = {"Authorization": f"Bearer {API_TOKEN}"}
        queued = requests.post(f"{base}/v1/messages", headers=auth, timeout=10, json={
            "to": "+5511987654321", "message": {"type": "text", "text": {"body": "released by honcho"}}})
        assert queued.status_code == 202, queued.text
        wait_for(lambda: processes.alive() and requests.get(f"{base}/v1/messages/{queued.json()['id']}",
                                                            headers=auth, timeout=10).json()["status"] == "read",
                 timeout=120, interval=0.5, what="the message to reach the simulator and be read")
        received = requests.get(f"http://127.0.0.1:{simulator_port}/_admin/messages", timeout=10).json()["messages"]
        assert [m for m in received if "released by honcho" in json.dumps(m)], received


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except (requests.ConnectionError, requests.Timeout):  # not listening yet, or slow to answer under load
        return False


def test_the_installed_simulator_loads_its_schema(installed, elsewhere):
    checked = _run([str(installed / "python"), "-c", (
        "from wa_outbox.simulator.validation import SCHEMA_PATH, RequestChecker\n"
        "import json\n"
        "assert SCHEMA_PATH.is_file(), SCHEMA_PATH\n"
        "RequestChecker()\n"
        "print(SCHEMA_PATH)\n")], elsewhere, _env())
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip().startswith(str(installed.parent))


def test_the_installed_package_is_typed(installed, elsewhere):
    """mypy reads the package from the virtualenv's site-packages, which it only does with py.typed."""
    pytest.importorskip("mypy", reason="mypy is not installed (it is in the dev extras)")
    shutil.copy(TYPED_USAGE, elsewhere / "usage.py")
    checked = _run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                    "--python-executable", str(installed / "python"), "usage.py"], elsewhere, _env(), timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_public_api_type_checks_from_the_checkout(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (it is in the dev extras)")
    checked = _run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                    "--cache-dir", str(tmp_path / "mypy-cache"), str(TYPED_USAGE.relative_to(ROOT))], ROOT,
                   {**os.environ}, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_checkouts_alembic_ini_still_migrates(scratch_url):
    """`alembic upgrade head` in the checkout (alembic.ini) runs the same revisions as `wa-outbox db upgrade`."""
    done = _run([sys.executable, "-m", "alembic", "upgrade", "head"], ROOT, {**os.environ, "DATABASE_URL": scratch_url})
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(scratch_url, autocommit=True) as db:
        assert db.execute("SELECT version_num FROM wa_outbox.alembic_version").fetchone()[0] == migrate.head()
