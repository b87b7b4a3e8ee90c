"""The container image: the repository's Dockerfile builds, and the image migrates a real Postgres, serves `/readyz`
on the `PORT` it is given and runs a worker, as a non-root user, with nothing of the checkout in it.

Slow: a wheelhouse made by the host's pip (so that the build itself needs no network: `PIP_NO_INDEX`,
`PIP_FIND_LINKS`, as docs/deploy.md says), then `docker build`: about two minutes here. The base image is, in order:
`WA_OUTBOX_TEST_BASE_IMAGE` when set; `python:3.11-slim` (the Dockerfile's default) when present or pullable;
`wa-outbox-test/python:3.11-bookworm` when present; else that image is made once from Debian bookworm with
debootstrap (Python 3.11 and its venv module: about 4 minutes on the 2-core development machine) and kept in
Docker's image store, so later runs reuse it. Skipped, saying why, without a Docker CLI, a daemon, a base image
(nothing pullable and no debootstrap), a package index for the host's pip, or a Postgres reachable over TCP (the
embedded one listens on a socket: the second run of .ci/run, against the local server, runs this module; the first
skips it before building anything).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import requests

from tests.conftest import API_TOKEN, APP_SECRET, _with_dbname, create_scratch_database, drop_database
from tests.live import wait_for
from tests.processes import free_port
from tests.system.test_packaging import _NO_INDEX
from wa_outbox import migrate

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BASE = "python:3.11-slim"
LOCAL_BASE = "wa-outbox-test/python:3.11-bookworm"
# Big or irrelevant to the build; the Dockerfile's .dockerignore leaves out the rest.
_NOT_CONTEXT = shutil.ignore_patterns(".git", ".venv", ".wa-outbox", "build", "dist", "*.egg-info", "__pycache__",
                                      ".pytest_cache", ".mypy_cache", "bench", "tests", "docs")

pytestmark = pytest.mark.slow


def _docker(*args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"docker {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def docker() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no container runtime: the docker CLI is not installed (.ci/run installs docker.io as root)")
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}", timeout=30)
    except subprocess.TimeoutExpired:
        pytest.skip("the Docker daemon does not answer (docker info timed out)")
    if info.returncode != 0:
        pytest.skip(f"no Docker daemon reachable: {(info.stderr.strip().splitlines() or ['?'])[-1]}")


def _have(image: str) -> bool:
    return _docker("image", "inspect", image, timeout=30).returncode == 0


@pytest.fixture(scope="module")
def base_image(docker) -> str:
    wanted = os.environ.get("WA_OUTBOX_TEST_BASE_IMAGE", "").strip()
    if wanted:
        if not _have(wanted):
            _docker("pull", wanted, timeout=600, check=True)
        return wanted
    for image in (DEFAULT_BASE, LOCAL_BASE):
        if _have(image):
            return image
    try:
        pulled = _docker("pull", DEFAULT_BASE, timeout=300)
    except subprocess.TimeoutExpired:
        pulled = None
    if pulled is not None and pulled.returncode == 0:
        return DEFAULT_BASE
    why = "timed out" if pulled is None else (pulled.stderr.strip().splitlines() or ["?"])[-1]
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        pytest.skip(f"no base image: {DEFAULT_BASE} cannot be pulled ({why}), and no debootstrap (as root) to make "
                    f"{LOCAL_BASE} from Debian")
    _debootstrap_base(LOCAL_BASE)
    return LOCAL_BASE


def _debootstrap_base(tag: str) -> None:
    """Debian bookworm's minimal base with Python 3.11 and its venv module, imported as `tag` (kept afterwards)."""
    with tempfile.TemporaryDirectory(prefix="wa-outbox-rootfs-") as where:
        rootfs = Path(where) / "rootfs"
        made = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                               "bookworm", str(rootfs)], capture_output=True, text=True, timeout=1200)
        if made.returncode != 0:
            pytest.skip(f"debootstrap could not make a base image: {(made.stdout + made.stderr)[-300:]}")
        for cache in (rootfs / "var" / "cache" / "apt" / "archives", rootfs / "var" / "lib" / "apt" / "lists"):
            for item in cache.glob("*"):
                if item.is_file():
                    item.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["docker", "import", "-c", "ENV LANG=C.UTF-8", "-", tag], stdin=tar.stdout,
                                  capture_output=True, text=True, timeout=600)
        assert tar.stdout is not None
        tar.stdout.close()
        assert tar.wait(timeout=60) == 0 and imported.returncode == 0, imported.stderr


@pytest.fixture(scope="module")
def tcp_server(server_url) -> str:
    """The test's Postgres server, when a container can reach it (over TCP, with --network host). Asked before the
    build, so that the suite's run on the embedded Postgres (a socket) skips at once instead of building for
    nothing: .ci/run's second run, against the local server, builds and runs the image."""
    host = urlsplit(server_url).hostname
    if not host or host.startswith("/"):
        pytest.skip("the test's Postgres listens on a socket only (the embedded one): the container reaches a "
                    "Postgres over TCP (set DATABASE_URL)")
    return server_url


@pytest.fixture(scope="module")
def image(tcp_server, base_image, tmp_path_factory):
    """The image, built from a copy of the checkout with an offline wheelhouse made by the host's pip."""
    context = tmp_path_factory.mktemp("context") / "wa-outbox"
    shutil.copytree(ROOT, context, ignore=_NOT_CONTEXT)
    wheelhouse = context / "wheelhouse"
    for args in (["wheel", "--wheel-dir", str(wheelhouse), "--constraint", "constraints.txt", "."],
                 ["download", "--dest", str(wheelhouse), "setuptools>=68", "wheel"]):
        done = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check"], cwd=context,
                              capture_output=True, text=True, timeout=900)
        found = _NO_INDEX.search(done.stdout + done.stderr) if done.returncode != 0 else None
        if found:
            pytest.skip(f"pip could not make the wheelhouse: no package index reachable ({found.group(0)})")
        assert done.returncode == 0, done.stdout + done.stderr
    tag = f"wa-outbox-test/app:{uuid.uuid4().hex[:8]}"
    _docker("build", "--tag", tag, "--build-arg", f"BASE_IMAGE={base_image}", "--build-arg", "PIP_NO_INDEX=1",
            "--build-arg", "PIP_FIND_LINKS=/src/wheelhouse", str(context), timeout=1200, check=True)
    yield tag
    _docker("image", "rm", "--force", tag, timeout=120)
    _docker("image", "prune", "--force", "--filter", "label=wa-outbox.stage=build", timeout=120)


@pytest.fixture
def tcp_database(tcp_server):
    name = create_scratch_database(tcp_server, prefix="wa_outbox_container")
    yield _with_dbname(tcp_server, name)
    drop_database(tcp_server, name)


class _Container:
    def __init__(self, image: str, env: dict[str, str], *command: str) -> None:
        self.name = f"wa-outbox-test-{uuid.uuid4().hex[:8]}"
        flags = [f"--env={k}={v}" for k, v in env.items()]
        _docker("run", "--detach", "--name", self.name, "--network", "host", *flags, image, *command, check=True)

    def running(self) -> bool:
        state = _docker("inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}", self.name, check=True)
        if state.stdout.split()[0] != "true":
            raise AssertionError(f"container exited {state.stdout.split()[1]}: {self.logs()}")
        return True

    def logs(self) -> str:
        done = _docker("logs", self.name)
        return done.stdout + done.stderr

    def __enter__(self) -> _Container:
        return self

    def __exit__(self, *exc_info: object) -> None:
        _docker("rm", "--force", self.name, timeout=120)


def _ready(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def test_the_image_runs_as_a_user_with_only_the_installed_package(image):
    who = _docker("run", "--rm", image, "id", "-u", check=True)
    assert who.stdout.strip() not in ("", "0"), who.stdout
    where = _docker("run", "--rm", image, "python3", "-c",
                    "import wa_outbox, os; print(wa_outbox.__file__); print(os.path.exists('/src'))", check=True)
    location, has_source = where.stdout.split()
    assert location.startswith("/opt/wa-outbox/lib/") and has_source == "False", where.stdout
    # the default command is the web, on $PORT
    command = _docker("image", "inspect", "--format", "{{json .Config.Cmd}} {{index .Config.Env}}", image, check=True)
    assert '["wa-outbox","web"]' in command.stdout and "PORT=8000" in command.stdout, command.stdout


def test_the_image_migrates_serves_readyz_on_port_and_runs_a_worker(image, tcp_database):
    env = {"DATABASE_URL": tcp_database, "WHATSAPP_APP_SECRET": APP_SECRET, "WHATSAPP_VERIFY_TOKEN": "vt",
           "WA_OUTBOX_API_TOKENS": API_TOKEN, "WHATSAPP_ACCESS_TOKEN": "test-access-token",
           "WHATSAPP_PHONE_NUMBER_ID": "100000000000001", "WHATSAPP_API_BASE_URL": "http://127.0.0.1:9/v23.0",
           "WA_OUTBOX_DRY_RUN": "true", "WEB_CONCURRENCY": "1", "WA_OUTBOX_WEB_THREADS": "2"}
    flags = [f"--env={k}={v}" for k, v in env.items()]
    upgraded = _docker("run", "--rm", "--network", "host", *flags, image, "wa-outbox", "db", "upgrade", timeout=300)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    port = free_port()
    with _Container(image, {**env, "PORT": str(port)}) as web, \
            _Container(image, env, "wa-outbox", "worker") as worker, \
            psycopg.connect(tcp_database, autocommit=True) as db:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: web.running() and _ready(f"{base}/readyz"), timeout=120, interval=0.5,
                 what="the container's /readyz")
        assert requests.get(f"{base}/readyz", timeout=10).json()["schema_version"] == migrate.head()
        wait_for(lambda: worker.running() and db.execute(
            "SELECT count(*) FROM wa_outbox.workers WHERE state = 'running'").fetchone()[0],
            timeout=120, interval=0.5, what="the container worker's heartbeat row")
        queued = requests.post(f"{base}/v1/messages", headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=10,
                               json={"to": "+5511987654321", "message": {"type": "text", "text": {"body": "hi"}}})
        assert queued.status_code == 202, queued.text
        wait_for(lambda: worker.running() and db.execute(
            "SELECT status FROM wa_outbox.notifications WHERE id = %s", (queued.json()["id"],)).fetchone()[0]
            == "sent", timeout=120, interval=0.5, what="the worker in the container to send it (dry run)")
